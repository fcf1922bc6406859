// Package fsmirror is the directory layer of a fencectl task tree: the plain
// directories that any shell can list, kept in step with the journal by
// atomic renames. It knows nothing of the journal; the fence package decides
// what moves where and calls fsmirror to do it.
//
// # Layout
//
//	<root>/inbox/<id>         drop box, adopted by ScanInbox + Move
//	<root>/available/<id>     state directories: task files only
//	<root>/claimed/<id>
//	<root>/done/<id>
//	<root>/failed/<id>
//	<root>/out/<id>/<name>    task outputs, staged, then published (Stage, Publish)
//	<root>/.fence/            journal and lock (owned by other packages)
//	<root>/.fence/tmp/        staging for new files (Stage)
//
// A task id is a file name matching [A-Za-z0-9][A-Za-z0-9._-]{0,127}; see
// ValidateID. Ids are validated before any path is built, so an id can never
// name a file outside its directory.
//
// # Atomic moves
//
// A Mirror holds an open descriptor for the root and for every directory of
// the tree, each opened with O_DIRECTORY|O_NOFOLLOW relative to its parent,
// and does all its work with *at system calls on those descriptors. A path
// is resolved once, when the tree is opened, so a directory swapped for a
// symlink afterwards is never followed.
//
// A task changes state by renameat2(RENAME_NOREPLACE) from one state
// directory to the other. The rename is atomic: a reader sees the file in
// exactly one place. NOREPLACE makes the kernel refuse to overwrite a file
// already at the destination (ExistsError), so two processes that disagree
// about the state of a task can never silently destroy one copy. Linux only.
//
// Where the file system lacks RENAME_NOREPLACE (renameat2 says EINVAL on
// NFS, ENOSYS or EOPNOTSUPP on some FUSE and CIFS mounts), a Mirror moves
// by link(2), an fsync of the destination directory, then unlink(2) of the
// old name, and remembers to do so for every later move. link fails with
// EEXIST on an occupied name, atomically even on NFS, so a move still never
// replaces a file. A crash between link and unlink leaves one file under
// two names (same device and inode), never two copies: SameFile tells the
// case apart, a later move onto the same file finishes it, and DropLink
// removes the old name.
//
// # Durability
//
// A rename is only durable once the directories are synced. After a rename
// the destination directory is fsynced, then the source directory, so the
// new name is on disk before the removal of the old one can be: a crash
// before the syncs may undo the move, or leave the file in both places on
// some file systems, but never in neither. New files are written to
// .fence/tmp, fsynced, closed and renamed in, so a state directory never
// holds a half-written file. The journal is the source of truth; a crash
// between the journal commit and the rename (or the fsyncs) is repaired by
// replaying the journal, which is why Move reports a missing source with
// fs.ErrNotExist and an occupied destination with ExistsError: replay can
// tell "already done" from "something else is there".
//
// # Symlinks and special files
//
// Symlinks are never followed. Before a task file is moved or opened it is
// examined with fstatat(AT_SYMLINK_NOFOLLOW), and anything that is not a
// regular file (symlink, FIFO, directory, device, socket) is refused with a
// NotRegularError. Files are opened with O_NOFOLLOW|O_NONBLOCK and checked
// again with fstat, so a FIFO swapped in at the last moment never blocks the
// caller. Listing (List, ScanInbox) never opens an entry at all.
//
// # Adoption
//
// Users drop files into inbox/ Maildir-style: write elsewhere on the same
// file system, then rename in. ScanInbox splits inbox/ into regular files
// with valid ids, which the caller adopts with Move(id, Inbox, Available),
// and rejected entries, which are reported and left exactly where they are:
// fsmirror never deletes a file a user dropped.
//
// # Crash points
//
// Mirror.Crash, when set, is called at named points (CrashAfterRename) so
// that tests can kill the process there and check that recovery works.
package fsmirror

//go:build fencetest

package fence

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencectl/fencectl/fsmirror"
)

// crashAt exits the process at a named point when FENCE_CRASH lists it.
// Points look like "claim:after-commit"; a listed name matches the whole
// point or the part after the colon ("after-commit" matches every op).
//
// Optional refinements, all read from the environment:
//
//   - FENCE_CRASH_AFTER=N crashes at the Nth matching hit in this process
//     (default 1, the first), e.g. the second move:after-rename of a commit
//     that moves two files.
//   - FENCE_CRASH_MARK=FILE writes the point's name (and the pid) to FILE
//     before acting, so a test can wait for the event instead of sleeping.
//   - FENCE_CRASH_ACTION=hang blocks forever at the point instead of
//     exiting (a stuck process that holds the lock, the journal open and
//     possibly a half-finished commit); the test ends it with a signal.
//     FENCE_CRASH_ACTION=pause waits there for FENCE_CRASH_PAUSE (a
//     duration, default 1s), then goes on: a test does something in
//     between (closes the client's side, say).
//     The default action, exit, exits with code 99.
func crashAt(point string) {
	list := os.Getenv("FENCE_CRASH")
	if list == "" {
		return
	}
	_, step, _ := strings.Cut(point, ":")
	for _, want := range strings.Split(list, ",") {
		if want == point || (step != "" && want == step) {
			hit := crashHits.Add(1)
			if n, err := strconv.ParseInt(os.Getenv("FENCE_CRASH_AFTER"), 10, 64); err == nil && n > hit {
				return
			}
			if mark := os.Getenv("FENCE_CRASH_MARK"); mark != "" {
				_ = os.WriteFile(mark, []byte(fmt.Sprintf("%s %d\n", point, os.Getpid())), 0o644)
			}
			if os.Getenv("FENCE_CRASH_ACTION") == "pause" {
				d, err := time.ParseDuration(os.Getenv("FENCE_CRASH_PAUSE"))
				if err != nil {
					d = time.Second
				}
				time.Sleep(d)
				return
			}
			if os.Getenv("FENCE_CRASH_ACTION") == "hang" {
				fmt.Fprintf(os.Stderr, "fencectl: test hang at %s (pid %d)\n", point, os.Getpid())
				for { // not select{}: the runtime would call that a deadlock and exit
					time.Sleep(time.Hour)
				}
			}
			fmt.Fprintf(os.Stderr, "fencectl: test crash at %s\n", point)
			os.Exit(99)
		}
	}
}

// crashHits counts the matching crash points this process has passed.
var crashHits atomic.Int64

// renameFault fails the rename of a file out of a directory as the kernel
// would, when FENCE_TEST_RENAME_FAULT lists it: comma-separated
// "dir/name=ERRNO" entries, ERRNO one of EPERM, EXDEV, EACCES, EROFS
// (say "inbox/t1=EPERM" for a file in a sticky drop box owned by another
// user); a path ending in * names every file it begins ("tmp/out-*":
// staged outputs, whose names are random). Read at every call, so a
// test can change it between commands.
//
// FENCE_TEST_LINK_MOVES=1 answers every rename with EINVAL, as renameat2
// with RENAME_NOREPLACE does on NFS: the tree then moves by link and
// unlink (see fsmirror's linkMove).
var renameFault = func(from fsmirror.Dir, name string) unix.Errno {
	if os.Getenv("FENCE_TEST_LINK_MOVES") != "" {
		return unix.EINVAL
	}
	list := os.Getenv("FENCE_TEST_RENAME_FAULT")
	if list == "" {
		return 0
	}
	for _, item := range strings.Split(list, ",") {
		path, errno, _ := strings.Cut(item, "=")
		if prefix, ok := strings.CutSuffix(path, "*"); ok {
			if !strings.HasPrefix(string(from)+"/"+name, prefix) {
				continue
			}
		} else if path != string(from)+"/"+name {
			continue
		}
		switch errno {
		case "EXDEV":
			return unix.EXDEV
		case "EACCES":
			return unix.EACCES
		case "EROFS":
			return unix.EROFS
		default:
			return unix.EPERM
		}
	}
	return 0
}

// noWatch makes the lease keeper's journal watch fail when
// FENCE_TEST_NO_WATCH is set, as when the user has run out of inotify
// instances.
func noWatch() bool { return os.Getenv("FENCE_TEST_NO_WATCH") != "" }

// testFSType pretends the tree is on the file system type named by
// FENCE_TEST_FSTYPE ("nfs", "fuse", "ext4": see fsmirror.FSTypeNamed; a
// name not in its table is a local type).
func testFSType() string { return os.Getenv("FENCE_TEST_FSTYPE") }

// renameTrace appends every rename and directory fsync of this process to
// the file FENCE_TEST_RENAME_LOG names, one line each ("rename OLD NEW",
// "sync DIR"), so that a test can simulate a power loss: undo every rename
// that no later fsync of its directory made durable (the CrashMonkey
// model), then boot again. Lines are short and appended with O_APPEND, so
// the processes of a test share one log without interleaving.
var renameTrace = func() func(op, a, b string) {
	path := os.Getenv("FENCE_TEST_RENAME_LOG")
	if path == "" {
		return nil
	}
	return func(op, a, b string) {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return
		}
		defer f.Close()
		line := op + " " + a
		if b != "" {
			line += " " + b
		}
		f.WriteString(line + "\n")
	}
}()

package fence

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
	"syscall"
)

// One tree, one user; root reads a user's tree but never writes it.
//
// A tree's files are private to the user who owns .fence (0700, 0600:
// the journal names every live token), and every file fencectl makes
// there is made by that user. Root can write there all the same, and
// what it made was root's: .fence/live, .fence/requests, the ceiling's
// files, a compacted journal.db, all 0700/0600, and the owner's next
// claim, run or command failed on them until root repaired them (found
// from outside). Root's chmods of what it took for the tree's private
// files followed what the owner put in their place between its check
// and its chmod, so a tree's owner could make root chmod any file of
// the host. So a process of root on a tree another user owns may read it
// but never writes it: every write, and everything a write makes first
// (staged content, request locks, .fence/boot), is refused with a
// *ForeignTreeError that says whom to run as, before anything is made.

// ForeignTreeError refuses a write by root to a tree another user owns.
type ForeignTreeError struct {
	Path  string // the tree's .fence
	Owner int    // its owner's uid
	Name  string // the owner's user name, "" if unknown
}

func (e *ForeignTreeError) Error() string {
	who := "uid " + strconv.Itoa(e.Owner)
	run := "'#" + strconv.Itoa(e.Owner) + "'" // sudo's way to name a uid
	if e.Name != "" {
		who = e.Name + " (" + who + ")"
		run = e.Name
	}
	return fmt.Sprintf("%s belongs to %s, and this runs as root: what fencectl wrote there as root would be root's, and would lock the tree's owner out; nothing was done. Run it as the tree's owner (sudo -u %s fencectl ...); root may only read the tree", e.Path, who, run)
}

// foreignOwner returns the refusal of writes by this process to the tree
// whose .fence is meta: not nil only for root on a tree root does not own.
func foreignOwner(meta string) *ForeignTreeError {
	if os.Geteuid() != 0 {
		return nil
	}
	fi, err := os.Lstat(meta)
	if err != nil {
		return nil
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Uid == 0 {
		return nil
	}
	return &ForeignTreeError{Path: meta, Owner: int(st.Uid), Name: userName(int(st.Uid))}
}

// userName is the name of the user uid, "" if unknown.
func userName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return ""
}

// refuseForeign returns the refusal of a write to this tree, or nil. A
// long-lived process of root (its daemon, run --loop) looks again at
// every write, an lstat: the tree may have been given to its user since.
func (t *Tree) refuseForeign() error {
	if os.Geteuid() != 0 {
		return nil
	}
	if e := foreignOwner(t.metaDir); e != nil {
		return e
	}
	return nil
}

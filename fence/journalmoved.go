package fence

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/fencectl/fencectl/journal"
)

// A long-lived process (run, run --loop, mcp, serve, the Go API) opens a
// tree's journal once. If `recover` (or `init --journal`) then points the
// tree at another journal (a new etcd prefix, a new cluster), the process
// would go on with the old one: its stale tokens are current there, and
// it moved files of the tree by what the old journal said (found from
// outside: a run completed its task in the old journal and moved the new
// holder's file to done/). Every step of such a Tree first checks that
// .fence/journal.json is still the file it opened (one lstat; the content
// compared only when the file changed), and stops with a JournalMovedError
// if not; a lease keeper takes that as a lost lease.

// openedConfig is the journal config a Tree's store was opened from.
type openedConfig struct {
	path    string
	content []byte
	mu      sync.Mutex
	seen    os.FileInfo // the file as last found the same
}

func newOpenedConfig(meta string) *openedConfig {
	path := filepath.Join(meta, journal.ConfigName)
	b, err := journal.ReadRegular(path, 1<<20)
	if err != nil {
		return nil
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return nil
	}
	return &openedConfig{path: path, content: b, seen: fi}
}

// refuseMoved returns a *JournalMovedError if the config is no longer
// the one opened; nil for a Tree without one (bbolt).
func (c *openedConfig) refuseMoved() error {
	if c == nil {
		return nil
	}
	fi, err := os.Lstat(c.path)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil && os.SameFile(fi, c.seen) && fi.Size() == c.seen.Size() && fi.ModTime().Equal(c.seen.ModTime()) {
		return nil
	}
	if err == nil {
		if b, rerr := journal.ReadRegular(c.path, 1<<20); rerr == nil && bytes.Equal(b, c.content) {
			c.seen = fi // written again the same: still this journal
			return nil
		}
	}
	return &JournalMovedError{Path: c.path}
}

// JournalMovedError says the tree's journal config changed since this
// process opened the tree (a recover or an init moved the journal): the
// journal this process holds is not the tree's any more.
type JournalMovedError struct{ Path string }

func (e *JournalMovedError) Error() string {
	return fmt.Sprintf("the tree's journal is no longer the one this process opened (%s changed: a recover or an init moved it): nothing was done; start this command again to use the journal the tree names now", e.Path)
}

// JournalMoved reports, for a process that keeps trees open (the daemon),
// whether this Tree's journal is no longer the one the tree names: such a
// Tree refuses every step (JournalMovedError), and the tree is to be
// opened again.
func (t *Tree) JournalMoved() bool { return t.config.refuseMoved() != nil }

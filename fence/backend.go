package fence

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/fencectl/fencectl/fsmirror"

	"github.com/fencectl/fencectl/journal"
	boltstore "github.com/fencectl/fencectl/journal/bolt"
)

// Which store holds a tree's journal: Options.Backend if set, else what
// the tree's .fence/journal.json names (written by init --journal), else
// the bbolt file in .fence. A program that does not link the backend a
// tree names gets a *journal.MissingDriverError before anything is done.

// backendFor returns the backend of the tree whose meta directory is meta,
// and whether the caller made it (and so closes it).
func (o Options) backendFor(meta string) (b journal.Backend, owned bool, err error) {
	if o.Backend != nil {
		return o.Backend, false, nil
	}
	cfg, found := JournalConfig{}, false
	if o.Journal != nil {
		cfg, found = *o.Journal, true
	} else if cfg, found, err = journal.ReadConfig(meta); err != nil {
		if errors.Is(err, fs.ErrPermission) {
			return nil, false, notYours(meta, err)
		}
		return nil, false, err
	}
	if !found {
		return boltstore.Backend{}, false, nil
	}
	if b, err = journal.BackendOf(cfg); err != nil {
		return nil, false, err
	}
	// A networked store bounds its first calls by the caller's timeout.
	if s, ok := b.(interface{ SetTimeout(time.Duration) }); ok {
		s.SetTimeout(o.Timeout)
	}
	return b, true, nil
}

// notYours explains a .fence this user may not read: another user's
// tree. It said "open .fence/journal.json: permission denied", naming a
// file a bbolt tree does not have (found from outside).
func notYours(meta string, err error) error {
	fi, serr := os.Lstat(meta)
	if serr != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int(st.Uid) == os.Geteuid() {
		return err
	}
	who := "uid " + strconv.Itoa(int(st.Uid))
	if name := userName(int(st.Uid)); name != "" {
		who = name + " (" + who + ")"
	}
	return fmt.Errorf("%s belongs to %s (mode %#o), and this user may not read it: a tree has one user; nothing was done. Run fencectl as that user (%w)", meta, who, fi.Mode().Perm(), err)
}

// closeBackend closes b if it holds anything (the etcd client).
func closeBackend(b journal.Backend) {
	if c, ok := b.(io.Closer); ok {
		c.Close()
	}
}

// JournalInfo says where a tree's journal is, for status and show.
type JournalInfo struct {
	Backend string `json:"backend"` // "bbolt" or "etcd"
	Where   string `json:"where"`   // the file, or the etcd URL
}

// Journal returns where the tree's journal is.
func (t *Tree) Journal() JournalInfo {
	return JournalInfo{Backend: t.store.Name(), Where: t.store.Path(t.metaDir)}
}

// JournalConfig names a journal store other than bbolt (see package
// journal's Config).
type JournalConfig = journal.Config

// ParseJournalURL reads an `init --journal` value,
// etcd://HOST:PORT[,HOST:PORT...]/PREFIX; a bad one is an
// *InvalidInputError.
func ParseJournalURL(s string) (JournalConfig, error) {
	c, err := journal.ParseURL(s)
	if err != nil {
		return c, invalidf(InputJournal, RuleFormat, s, "%v", err)
	}
	return c, nil
}

// TreeJournal returns the journal config of the tree at root; found is
// false for a bbolt tree (or no tree).
func TreeJournal(root string) (c JournalConfig, found bool, err error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return c, false, err
	}
	return journal.ReadConfig(filepath.Join(abs, string(fsmirror.Meta)))
}

// HasBackend reports whether this program links the backend called name.
func HasBackend(name string) bool { return journal.Registered(name) }

package fence

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/fencectl/fencectl/fsmirror"
	"github.com/fencectl/fencectl/journal"
	boltstore "github.com/fencectl/fencectl/journal/bolt"
	"github.com/fencectl/fencectl/journal/record"
)

// Init creates the tree at root (and root itself if missing) and its
// journal. On an existing tree it checks the journal and changes nothing;
// created says which happened.
func Init(root string, d record.Defaults) (created bool, err error) {
	res, err := InitTree(root, d, Options{})
	return res.Created, err
}

// InitResult says what InitTree found or made.
type InitResult struct {
	Root     string
	Created  bool            // false: the tree existed and nothing changed
	Defaults record.Defaults // the tree's settings: d if created, else the existing ones
}

// InitTree is Init that also reports the tree's settings, which differ
// from d when the tree already existed (or another init won a race). It
// refuses, changing nothing, a directory that holds task files but no
// journal: an empty journal would hide them, and recover is the way back.
// The journal is made under the tree's lock, so of several inits at once
// exactly one creates it and the others report what it made. Of o, only
// Backend, Timeout (the wait for the lock), Clock (the token counter
// starts above it) and AllowNetworkFS (see refuseNetworkFS) apply.
func InitTree(root string, d record.Defaults, o Options) (InitResult, error) {
	res := InitResult{Defaults: d}
	timeout, clock := o.lockTimeout(), o.clock()
	if err := checkDefaults(d); err != nil {
		return res, err
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return res, err
	}
	res.Root = abs
	if err := insideTree(abs); err != nil {
		return res, err
	}
	meta := filepath.Join(abs, string(fsmirror.Meta))
	if e := foreignOwner(meta); e != nil {
		return res, e
	}
	if o.Journal, err = checkJournalChoice(abs, meta, o); err != nil {
		return res, err
	}
	store, owned, err := o.backendFor(meta)
	if err != nil {
		return res, err
	}
	if owned {
		defer closeBackend(store)
	}
	exists, err := store.Exists(meta)
	if err != nil {
		return res, err
	}
	if !exists {
		if err := refuseOrphanTasks(abs); err != nil {
			return res, err
		}
		if err := refuseNetworkFS(abs, store, o.AllowNetworkFS); err != nil {
			return res, err
		}
	}
	m, err := fsmirror.Create(abs)
	if err != nil {
		return res, err
	}
	defer m.Close()
	if err := m.SplitMount(); err != nil {
		return res, err
	}
	if exists { // an existing tree: a reader, under the shared lock
		if err := refuseUnfinishedRecover(abs, meta); err != nil {
			return res, err
		}
		if err := refuseSharedPrefix(meta, o); err != nil {
			return res, err
		}
		res.Defaults, err = readDefaults(func(o journal.OpenOptions) (journal.Store, error) { return store.Open(meta, o) }, journal.OpenOptions{ReadOnly: true, Timeout: timeout, Clock: clock})
		return res, err
	}
	lock, err := store.LockTree(meta, timeout)
	if err != nil {
		return res, err
	}
	defer lock.Release()
	if exists, err = store.Exists(meta); err != nil {
		return res, err
	} else if exists { // another init won the race
		if err := refuseSharedPrefix(meta, o); err != nil {
			return res, err
		}
		res.Defaults, err = readDefaults(lock.Open, journal.OpenOptions{ReadOnly: true, Timeout: timeout, Clock: clock})
		return res, err
	}
	if err := refuseOrphanTasks(abs); err != nil {
		return res, err
	}
	seed, err := tokenFloor(meta, clock(), lock.Salvage())
	if err != nil {
		return res, err
	}
	// The config first, with the tree id the journal will have: a crash
	// before Create leaves a tree that names a journal not there yet
	// (init again makes it), never a tree that looks like bbolt while its
	// journal is in etcd.
	if o.Journal != nil && o.Backend == nil {
		cfg := *o.Journal
		cfg.TreeID = newTreeID(lock)
		if err := journal.WriteConfig(meta, cfg); err != nil {
			return res, err
		}
	}
	if err := lock.Create(d, seed); err != nil {
		if o.Journal != nil && o.Backend == nil {
			journal.RemoveConfig(meta)
		}
		return res, overlapInput(err)
	}
	res.Created = true
	// A recover cut short before this journal was made left its mark: it
	// speaks of a journal that is gone, and must not make the next recover
	// take this one for unfinished.
	if err := removeSynced(filepath.Join(meta, recoveringName)); err != nil {
		return res, err
	}
	if o.Journal == nil && (o.Backend == nil || o.Backend.Name() == "bbolt") && (o.Clock == nil || o.Boot != nil) {
		// The lease clock starts with the tree, so that no later command
		// (a refused one included) has a file to write in this boot; a
		// new journal holds no lease of an earlier boot.
		boot := o.Boot
		if boot == nil {
			boot = SystemBootClock
		}
		if lc, err := openLeaseClock(meta, clock, boot, true); err == nil {
			lc.markSwept()
		}
	}
	return res, nil
}

// checkJournalChoice refuses an init that asks for a journal other than
// the one the tree has: init never moves a journal. It returns the
// journal to use: o.Journal, with the tree id the tree's config records
// (so that opening a journal of another tree there is refused).
func checkJournalChoice(root, meta string, o Options) (*JournalConfig, error) {
	if o.Journal == nil || o.Backend != nil {
		return o.Journal, nil
	}
	have, found, err := journal.ReadConfig(meta)
	if err != nil {
		return nil, err
	}
	if found && !have.SameStore(*o.Journal) {
		return nil, otherJournal(root, have.URL(), o.Journal.URL())
	}
	if !found {
		if ok, err := (boltstore.Backend{}).Exists(meta); err != nil {
			return nil, err
		} else if ok {
			return nil, otherJournal(root, boltstore.Path(meta), o.Journal.URL())
		}
		return o.Journal, nil
	}
	cfg := *o.Journal
	cfg.TreeID = have.TreeID
	return &cfg, nil
}

// newTreeID is the id lock's Create gives a new journal, for the tree's
// config to record; "" for a store that keeps no config (bbolt: the
// journal is in the tree).
func newTreeID(lock journal.TreeLock) string {
	if l, ok := lock.(interface{ NewTreeID() string }); ok {
		return l.NewTreeID()
	}
	return ""
}

// recordTreeID writes the id of the journal lock is about to make into
// the tree's config, where recover (which makes a new journal) needs it:
// from then on the tree opens only that journal. Nothing to do for a tree
// with no config (bbolt) or a backend the caller gave.
func recordTreeID(meta string, lock journal.TreeLock, o Options) error {
	id := newTreeID(lock)
	if id == "" || o.Backend != nil {
		return nil
	}
	cfg, found, err := journal.ReadConfig(meta)
	if err != nil || !found {
		return err
	}
	cfg.TreeID = id
	return journal.WriteConfig(meta, cfg)
}

func otherJournal(root, have, ask string) error {
	return invalidf(InputJournal, RuleConflict, ask, "task tree %s already keeps its journal in %s; init never moves a journal, so --journal %s did not apply; nothing changed", root, have, ask)
}

// refuseSharedPrefix refuses to attach a tree to a journal that exists in
// etcd when the tree does not name it: the prefix belongs to another tree,
// and two trees on one journal would each see the other's tasks as lost.
func refuseSharedPrefix(meta string, o Options) error {
	if o.Journal == nil || o.Backend != nil {
		return nil
	}
	if _, found, err := journal.ReadConfig(meta); err != nil || found {
		return err
	}
	return invalidf(InputJournal, RuleSharedPrefix, o.Journal.URL(), "%s already holds the journal of another task tree; nothing changed. Each tree needs a prefix of its own: choose another, or run init in the directory of the tree it belongs to", o.Journal.URL())
}

// overlapInput is err, or for an etcd prefix that overlaps another
// tree's, the refusal of the --journal given (exit 2).
func overlapInput(err error) error {
	if overlap, ok := errors.AsType[*journal.PrefixOverlapError](err); ok {
		return invalidf(InputJournal, RuleSharedPrefix, overlap.Prefix, "%v; nothing changed: choose a prefix beside the other tree's (/fleet/a and /fleet/b, not /fleet and /fleet/b)", overlap)
	}
	return err
}

// readDefaults opens the journal with open (the backend's, or the tree
// lock's when held) and reads the tree's settings.
func readDefaults(open func(journal.OpenOptions) (journal.Store, error), o journal.OpenOptions) (d record.Defaults, err error) {
	db, err := open(o)
	if err != nil {
		return d, err
	}
	defer db.Close()
	err = db.View(func(tx journal.Tx) error {
		d, err = tx.Defaults()
		return err
	})
	return d, err
}

// refuseOrphanTasks refuses to init a directory whose state directories
// hold entries while it has no journal: those are a tree's tasks, and an
// empty journal would hide them (claims would find nothing to claim).
// recover is what adopts them.
func refuseOrphanTasks(root string) error {
	var found []string
	for _, d := range fsmirror.StateDirs {
		// Never through a symlink: its target is no directory of this
		// tree, and what is in it is none of init's business to name.
		fd, err := unix.Open(filepath.Join(root, string(d)), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // missing (init makes it), or not a directory (init reports it)
		}
		f := os.NewFile(uintptr(fd), string(d))
		names, _ := f.Readdirnames(1)
		f.Close()
		if len(names) > 0 {
			found = append(found, fmt.Sprintf("%s/%s", d, names[0]))
		}
	}
	if len(found) == 0 {
		return nil
	}
	return invalidf(InputRoot, RuleOrphanTasks, root, "%s holds task files (%s) but no journal: init would make an empty journal that hides them; nothing changed.", root, strings.Join(found, ", "))
}

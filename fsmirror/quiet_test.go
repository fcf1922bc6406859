package fsmirror_test

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/fencectl/fencectl/fsmirror"
)

// names lists dir's entry names.
func names(t *testing.T, m *fsmirror.Mirror, dir fsmirror.Dir) []string {
	t.Helper()
	es, err := m.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name)
	}
	return out
}

// quietInbox makes m watch its quiet directories and lists inbox/ until
// a listing is skipped, failing if none is.
func quietInbox(t *testing.T, m *fsmirror.Mirror) {
	t.Helper()
	fsmirror.WatchSmallDirs(t)
	m.WatchQuiet()
	for range 3 {
		before := m.QuietListings()
		if got := names(t, m, fsmirror.Inbox); len(got) != 0 {
			t.Fatalf("inbox holds %v, want it empty", got)
		}
		if m.QuietListings() == before {
			return
		}
	}
	t.Fatal("an empty inbox/ was read at every listing: WatchQuiet skips none")
}

// A small directory is read every time (not worth an inotify instance);
// a grown one is watched from its second listing on, without the tests'
// setting.
func TestQuiet_OnlyGrownDirsAreWatched(t *testing.T) {
	for _, c := range []struct {
		name  string
		grow  int // files made and removed first
		reads int // of 5 listings
	}{{"small", 0, 5}, {"grown", 2000, 2}} {
		t.Run(c.name, func(t *testing.T) {
			m := newTree(t)
			for i := range c.grow {
				put(t, m, fsmirror.Inbox, fmt.Sprintf("grow-%04d", i), "")
			}
			for i := range c.grow {
				if err := os.Remove(m.Path(fsmirror.Inbox, fmt.Sprintf("grow-%04d", i))); err != nil {
					t.Fatal(err)
				}
			}
			m.WatchQuiet()
			for range 5 {
				names(t, m, fsmirror.Inbox)
			}
			if got := m.QuietListings(); got != c.reads {
				t.Errorf("5 listings of a %s empty inbox/ read it %d times, want %d", c.name, got, c.reads)
			}
		})
	}
}

func TestQuiet_EmptyInboxNotReadAgain(t *testing.T) {
	m := newTree(t)
	names(t, m, fsmirror.Inbox) // before WatchQuiet: read, as always
	quietInbox(t, m)
	before := m.QuietListings()
	for range 10 {
		names(t, m, fsmirror.Inbox)
		names(t, m, fsmirror.Staging)
	}
	// .fence/tmp is read twice (the second listing watches it), inbox/
	// not at all.
	if got := m.QuietListings() - before; got != 2 {
		t.Errorf("20 listings of the two empty directories read %d, want 2", got)
	}
}

// Every way an entry can appear in a quiet inbox/ is seen by the next
// listing.
func TestQuiet_EveryArrivalIsSeen(t *testing.T) {
	m := newTree(t)
	outside := t.TempDir()
	ways := map[string]func(path string) error{
		"create": func(p string) error { return os.WriteFile(p, nil, 0o644) },
		"rename in": func(p string) error {
			src := outside + "/moved"
			if err := os.WriteFile(src, nil, 0o644); err != nil {
				return err
			}
			return os.Rename(src, p)
		},
		"hard link": func(p string) error {
			src := outside + "/linked"
			if err := os.WriteFile(src, nil, 0o644); err != nil {
				return err
			}
			return os.Link(src, p)
		},
		"mkdir":   func(p string) error { return os.Mkdir(p, 0o755) },
		"symlink": func(p string) error { return os.Symlink("/etc/passwd", p) },
		"fifo":    func(p string) error { return unix.Mkfifo(p, 0o644) },
	}
	for way, make := range ways {
		quietInbox(t, m)
		if err := make(m.Path(fsmirror.Inbox, "t1")); err != nil {
			t.Fatal(err)
		}
		if got := names(t, m, fsmirror.Inbox); !slices.Equal(got, []string{"t1"}) {
			t.Errorf("%s: the listing after it found %v, want [t1]", way, got)
		}
		if err := os.RemoveAll(m.Path(fsmirror.Inbox, "t1")); err != nil {
			t.Fatal(err)
		}
		os.RemoveAll(outside + "/moved")
		os.RemoveAll(outside + "/linked")
	}
}

// An inbox/ replaced by a new directory (Refresh) is read, not taken for
// the old one the watch was on.
func TestQuiet_ReplacedInboxIsRead(t *testing.T) {
	m := newTree(t)
	quietInbox(t, m)
	if err := os.Rename(m.Path(fsmirror.Inbox, ""), m.Path("", "inbox.old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(m.Path(fsmirror.Inbox, ""), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Refresh(); err != nil {
		t.Fatal(err)
	}
	names(t, m, fsmirror.Inbox)
	names(t, m, fsmirror.Inbox)
	put(t, m, fsmirror.Inbox, "t1", "")
	if got := names(t, m, fsmirror.Inbox); !slices.Equal(got, []string{"t1"}) {
		t.Errorf("the new inbox/ lists %v, want [t1]", got)
	}
}

// Listings from several goroutines while files come and go: a listing
// made after a file was created always finds it, whatever the other
// listings read and concluded meanwhile.
func TestQuiet_ConcurrentListingsMissNothing(t *testing.T) {
	m := newTree(t)
	quietInbox(t, m)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := m.List(fsmirror.Inbox); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	missed := 0
	for i := range 3000 {
		name := fmt.Sprintf("t%d", i)
		path := m.Path(fsmirror.Inbox, name)
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if got := names(t, m, fsmirror.Inbox); !slices.Contains(got, name) {
			missed++
		}
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if missed > 0 {
		t.Errorf("%d of 3000 files were not in a listing made after they were created", missed)
	}
}

package fence_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/fsmirror"
	"github.com/fencectl/fencectl/journal"
	boltstore "github.com/fencectl/fencectl/journal/bolt"
	"github.com/fencectl/fencectl/journal/record"
)

func TestTree_Init(t *testing.T) {
	root := filepath.Join(t.TempDir(), "a", "tree") // Init makes missing parents too
	created, err := fence.Init(root, testDefaults)
	if err != nil || !created {
		t.Fatalf("Init = %v, %v; want true, nil", created, err)
	}
	for _, d := range []string{"inbox", "available", "claimed", "done", "failed", "out", ".fence"} {
		if fi, err := os.Lstat(filepath.Join(root, d)); err != nil || !fi.IsDir() {
			t.Errorf("%s/ missing after Init: %v", d, err)
		}
	}
	for _, p := range []string{".fence", ".fence/journal.db"} {
		fi, err := os.Stat(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o007 != 0 {
			t.Errorf("%s is world-accessible: %v", p, fi.Mode().Perm())
		}
	}
	// Again: nothing changes, and the defaults stay those of the first init.
	created, err = fence.Init(root, record.Defaults{TTL: time.Hour, MaxAttempts: 9})
	if err != nil || created {
		t.Fatalf("second Init = %v, %v; want false, nil", created, err)
	}
	tree, err := fence.Open(root, fence.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tree.Close()
	st, err := tree.Status(bg)
	if err != nil {
		t.Fatal(err)
	}
	if st.Defaults != testDefaults {
		t.Errorf("defaults after a second Init = %+v, want %+v", st.Defaults, testDefaults)
	}
	if st.Root != tree.Root() || !filepath.IsAbs(st.Root) {
		t.Errorf("Status.Root = %q, Root() = %q", st.Root, tree.Root())
	}
}

func TestTree_InitInvalidDefaults(t *testing.T) {
	for _, d := range []record.Defaults{{TTL: 0, MaxAttempts: 3}, {TTL: -time.Second, MaxAttempts: 3}, {TTL: time.Minute, MaxAttempts: 0}} {
		root := filepath.Join(t.TempDir(), "tree")
		_, err := fence.Init(root, d)
		var ie *fence.InvalidInputError
		if !errors.As(err, &ie) {
			t.Errorf("Init(%+v): err = %v, want *InvalidInputError", d, err)
		}
		if ok, _ := boltstore.Exists(filepath.Join(root, ".fence")); ok {
			t.Errorf("Init(%+v) made a journal although refused", d)
		}
	}
}

func TestTree_InitRefusesOtherVersion(t *testing.T) {
	root := filepath.Join(t.TempDir(), "tree")
	if _, err := fence.Init(root, testDefaults); err != nil {
		t.Fatal(err)
	}
	b, err := bolt.Open(filepath.Join(root, ".fence", "journal.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("meta")).Put([]byte("version"), []byte("99")) }); err != nil {
		t.Fatal(err)
	}
	b.Close()
	_, err = fence.Init(root, testDefaults)
	var ve *fence.VersionError
	if !errors.As(err, &ve) || ve.Found != "99" {
		t.Fatalf("Init on a journal of version 99: err = %v, want *VersionError", err)
	}
	tree, err := fence.Open(root, fence.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tree.Close()
	if _, err := tree.Status(bg); !errors.As(err, &ve) {
		t.Errorf("Status on a journal of version 99: err = %v, want *VersionError", err)
	}
}

func TestTree_OpenWithoutJournal(t *testing.T) {
	root := t.TempDir()
	_, err := fence.Open(root, fence.Options{})
	var nj *fence.NoJournalError
	if !errors.As(err, &nj) || !errors.Is(err, journal.ErrNoJournal) {
		t.Fatalf("Open of a directory without a journal: err = %v, want *NoJournalError matching ErrNoJournal", err)
	}
	if !strings.Contains(err.Error(), "init") {
		t.Errorf("message %q does not name init", err)
	}
	entries, _ := os.ReadDir(root)
	if len(entries) != 0 {
		t.Errorf("Open without a journal created %v", names(entries))
	}
	if _, err := fence.Open(filepath.Join(root, "missing"), fence.Options{}); !errors.Is(err, journal.ErrNoJournal) {
		t.Errorf("Open of a missing directory: err = %v, want ErrNoJournal", err)
	}
}

func TestTree_AddAndClaim(t *testing.T) {
	tree := newTree(t)
	res := add(t, tree, "t1", 0)
	if res.Task.State != record.Available || res.Path != tree.Path("t1", record.Available) || res.Event == nil || res.Event.Type != record.EvAdd {
		t.Errorf("Add result = %+v", res)
	}
	if res.Task.MaxAttempts != testDefaults.MaxAttempts {
		t.Errorf("MaxAttempts = %d, want the tree default %d", res.Task.MaxAttempts, testDefaults.MaxAttempts)
	}
	fileAt(t, tree, "t1", record.Available)
	before, _ := tree.Status(bg)
	c := claim(t, tree, "", "agent-a")
	if c.Task.ID != "t1" || c.Agent != "agent-a" || c.Renewed {
		t.Errorf("Claim = %+v", c)
	}
	if c.Token <= before.LastToken {
		t.Errorf("token %d not above the journal's last token %d", c.Token, before.LastToken)
	}
	if c.Path != tree.Path("t1", record.Claimed) {
		t.Errorf("Claim path = %q", c.Path)
	}
	fileAt(t, tree, "t1", record.Claimed)
	if c.Task.Lease == nil || c.Task.Lease.Token != c.Token || !c.Task.Lease.Deadline.Equal(c.Deadline) {
		t.Fatalf("lease = %+v", c.Task.Lease)
	}
	if got := c.Deadline.Sub(c.Task.Lease.ClaimedAt); got != testDefaults.TTL {
		t.Errorf("lease length = %v, want the tree default %v", got, testDefaults.TTL)
	}
	if _, err := tree.Verify(bg, fence.FencedRequest{ID: "t1", Token: c.Token}); err != nil {
		t.Errorf("Verify of the fresh token: %v", err)
	}
	done, err := tree.Complete(bg, fence.FencedRequest{ID: "t1", Token: c.Token, Agent: "agent-a"})
	if err != nil {
		t.Fatal(err)
	}
	if done.Task.State != record.Done || done.Retry || done.Path != tree.Path("t1", record.Done) {
		t.Errorf("Complete = %+v", done)
	}
	fileAt(t, tree, "t1", record.Done)
}

func TestTree_AddGeneratesIDAndTakesContent(t *testing.T) {
	tree := newTree(t)
	res, err := tree.Add(bg, fence.AddRequest{Content: strings.NewReader("payload")})
	if err != nil {
		t.Fatal(err)
	}
	if err := fence.ValidateID(res.Task.ID); err != nil || len(res.Task.ID) != 26 {
		t.Errorf("generated id %q: %v", res.Task.ID, err)
	}
	if b, err := os.ReadFile(res.Path); err != nil || string(b) != "payload" {
		t.Errorf("content = %q, %v", b, err)
	}
	empty, err := tree.Add(bg, fence.AddRequest{ID: "empty", MaxAttempts: 5})
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(empty.Path); err != nil || fi.Size() != 0 {
		t.Errorf("empty task: %v, %v", fi, err)
	}
	if empty.Task.MaxAttempts != 5 {
		t.Errorf("MaxAttempts = %d, want 5", empty.Task.MaxAttempts)
	}
}

func TestTree_AddDuplicate(t *testing.T) {
	tree := newTree(t)
	add(t, tree, "t1", 0)
	for _, st := range []string{"available", "claimed", "done"} {
		t.Run(st, func(t *testing.T) {
			switch st {
			case "claimed":
				claim(t, tree, "t1", "a")
			case "done":
				v, _ := tree.Show(bg, "t1")
				if _, err := tree.Complete(bg, fence.FencedRequest{ID: "t1", Token: v.Task.Lease.Token}); err != nil {
					t.Fatal(err)
				}
			}
			before := snap(t, tree)
			_, err := tree.Add(bg, fence.AddRequest{ID: "t1", Content: strings.NewReader("other content")})
			var ie *fence.InvalidInputError
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), "t1") {
				t.Fatalf("duplicate Add: err = %v, want *InvalidInputError naming t1", err)
			}
			unchanged(t, tree, before, "duplicate Add")
			v, _ := tree.Show(bg, "t1")
			fileAt(t, tree, "t1", v.Task.State) // the original content
		})
	}
}

func TestTree_AddInvalid(t *testing.T) {
	tree := newTree(t)
	before := snap(t, tree)
	for _, req := range []fence.AddRequest{
		{ID: "../escape"}, {ID: "a/b"}, {ID: ".hidden"}, {ID: "-flag"}, {ID: ".."}, {ID: strings.Repeat("x", 129)},
		{ID: "ok", MaxAttempts: -1},
	} {
		_, err := tree.Add(bg, req)
		var ie *fence.InvalidInputError
		if !errors.As(err, &ie) {
			t.Errorf("Add(%+v): err = %v, want *InvalidInputError", req, err)
		}
	}
	unchanged(t, tree, before, "invalid Add")
}

func TestTree_ClaimOrder(t *testing.T) {
	tree := newTree(t)
	// Added in this order; claimed highest priority first, then oldest.
	for _, a := range []struct {
		id string
		p  int64
	}{{"a", 0}, {"b", 5}, {"c", 5}, {"d", -1}, {"e", 0}, {"f", 100}} {
		add(t, tree, a.id, a.p)
	}
	var got []string
	var last uint64
	for i := 0; i < 6; i++ {
		c := claim(t, tree, "", "agent")
		got = append(got, c.Task.ID)
		if c.Token <= last {
			t.Errorf("token %d not above the previous %d", c.Token, last)
		}
		last = c.Token
	}
	if want := []string{"f", "b", "c", "a", "e", "d"}; !reflect.DeepEqual(got, want) {
		t.Errorf("claim order = %v, want %v", got, want)
	}
	if _, err := tree.Claim(bg, fence.ClaimRequest{Agent: "agent"}); !errors.Is(err, fence.ErrNothingToClaim) {
		t.Errorf("claim with every task claimed: err = %v, want ErrNothingToClaim", err)
	}
}

func TestTree_ClaimOrderAfterRelease(t *testing.T) {
	tree := newTree(t)
	add(t, tree, "old", 0)
	add(t, tree, "young", 0)
	c := claim(t, tree, "", "a")
	if c.Task.ID != "old" {
		t.Fatalf("claimed %s first", c.Task.ID)
	}
	if _, err := tree.Release(bg, fence.FencedRequest{ID: "old", Token: c.Token}); err != nil {
		t.Fatal(err)
	}
	// A released task keeps its age: it comes first again.
	if c := claim(t, tree, "", "b"); c.Task.ID != "old" {
		t.Errorf("after release, claimed %s, want old (age is the add, not the release)", c.Task.ID)
	}
}

func TestTree_ClaimNothing(t *testing.T) {
	tree := newTree(t)
	before := snap(t, tree)
	_, err := tree.Claim(bg, fence.ClaimRequest{Agent: "a"})
	if !errors.Is(err, fence.ErrNothingToClaim) {
		t.Fatalf("claim on an empty tree: err = %v, want ErrNothingToClaim", err)
	}
	unchanged(t, tree, before, "empty claim")
}

func TestTree_ClaimNamed(t *testing.T) {
	tree := newTree(t)
	add(t, tree, "low", -10)
	add(t, tree, "high", 10)
	c := claim(t, tree, "low", "a")
	if c.Task.ID != "low" {
		t.Fatalf("named claim got %s", c.Task.ID)
	}
	before := snap(t, tree)
	_, err := tree.Claim(bg, fence.ClaimRequest{ID: "low", Agent: "b"})
	var na *fence.NotAvailableError
	if !errors.As(err, &na) || !reflect.DeepEqual(*na, fence.NotAvailableError{Task: "low", State: record.Claimed, Op: "claim"}) {
		t.Fatalf("claim of a claimed task: err = %v, want NotAvailableError{low claimed claim}", err)
	}
	unchanged(t, tree, before, "claim of a claimed task")
	// Unknown id: no such task, even though something else is available.
	_, err = tree.Claim(bg, fence.ClaimRequest{ID: "ghost", Agent: "b"})
	var ns *fence.NoSuchTaskError
	if !errors.As(err, &ns) || ns.Task != "ghost" {
		t.Fatalf("claim of an unknown task: err = %v, want NoSuchTaskError{ghost}", err)
	}
	_, err = tree.Claim(bg, fence.ClaimRequest{ID: "../x", Agent: "b"})
	var ie *fence.InvalidInputError
	if !errors.As(err, &ie) {
		t.Fatalf("claim of an invalid id: err = %v, want InvalidInputError", err)
	}
	unchanged(t, tree, before, "refused claims")
	// Done and failed tasks are not available either.
	if _, err := tree.Complete(bg, fence.FencedRequest{ID: "low", Token: c.Token}); err != nil {
		t.Fatal(err)
	}
	_, err = tree.Claim(bg, fence.ClaimRequest{ID: "low", Agent: "b"})
	if !errors.As(err, &na) || na.State != record.Done {
		t.Errorf("claim of a done task: err = %v, want NotAvailableError{done}", err)
	}
}

func TestTree_ClaimRestoreWithToken(t *testing.T) {
	tree := newTree(t)
	add(t, tree, "t1", 0)
	add(t, tree, "t2", 0)
	c := claim(t, tree, "t1", "a")
	claimsBefore := countEvents(t, tree, record.EvClaim)
	for _, req := range []fence.ClaimRequest{
		{Token: c.Token, Agent: "a"},
		{Token: c.Token, ID: "t1", Agent: "a-after-restart"}, // the agent name is a label
	} {
		r, err := tree.Claim(bg, req)
		if err != nil {
			t.Fatalf("restore %+v: %v", req, err)
		}
		if r.Token != c.Token || !r.Renewed || r.Task.ID != "t1" || r.Path != tree.Path("t1", record.Claimed) {
			t.Errorf("restore %+v = %+v, want the same claim renewed", req, r)
		}
		if r.Deadline.Before(c.Deadline) {
			t.Errorf("restore shortened the lease: deadline %v, was %v", r.Deadline, c.Deadline)
		}
	}
	if n := countEvents(t, tree, record.EvClaim); n != claimsBefore {
		t.Errorf("restore made %d new claim events", n-claimsBefore)
	}
	before := snap(t, tree)
	// The token names t1: it does not hold t2.
	_, err := tree.Claim(bg, fence.ClaimRequest{Token: c.Token, ID: "t2", Agent: "a"})
	se := staleErr(t, err)
	if want := (fence.StaleTokenError{Reason: fence.ReasonNotHeld, Task: "t2", Yours: c.Token, State: record.Available}); *se != want {
		t.Errorf("restore on another task: %+v, want %+v", *se, want)
	}
	// A token never issued, without an id.
	_, err = tree.Claim(bg, fence.ClaimRequest{Token: c.Token + 1000, Agent: "a"})
	se = staleErr(t, err)
	if se.Reason != fence.ReasonNotHeld || se.Yours != c.Token+1000 {
		t.Errorf("restore with a never-issued token: %+v", *se)
	}
	unchanged(t, tree, before, "refused restores")
	// After complete the token is stale, and the refusal says so.
	if _, err := tree.Complete(bg, fence.FencedRequest{ID: "t1", Token: c.Token}); err != nil {
		t.Fatal(err)
	}
	cev := eventOf(t, tree, "t1", record.EvComplete)
	before = snap(t, tree)
	_, err = tree.Claim(bg, fence.ClaimRequest{Token: c.Token, Agent: "a"})
	se = staleErr(t, err)
	if se.Reason != fence.ReasonStaleToken || se.Task != "t1" || se.Yours != c.Token || se.Current != 0 || se.Holder != "" ||
		se.State != record.Done || se.LostBy != "completed" || !se.LostAt.Equal(cev.Time) {
		t.Errorf("restore after complete: %+v (complete at %v)", *se, cev.Time)
	}
	unchanged(t, tree, before, "stale restore")
}

// claim --token renews the lease: it never shortens it. A claim that asked
// for a long lease and is restored without --ttl keeps its own length, as a
// heartbeat without --ttl does.
func TestTree_ClaimRestoreKeepsLeaseLength(t *testing.T) {
	tree := newTree(t)
	add(t, tree, "t1", 0)
	c, err := tree.Claim(bg, fence.ClaimRequest{ID: "t1", Agent: "a", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	r, err := tree.Claim(bg, fence.ClaimRequest{Token: c.Token, Agent: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Deadline.Before(c.Deadline) {
		t.Errorf("restore shortened the lease: deadline %v, was %v (claimed with --ttl 1h, tree default %v)", r.Deadline, c.Deadline, testDefaults.TTL)
	}
	hb := eventOf(t, tree, "t1", record.EvHeartbeat)
	if got := hb.Deadline.Sub(hb.Time); got != time.Hour {
		t.Errorf("restore renewed the lease by %v, want the claim's own 1h", got)
	}
}

func countEvents(t *testing.T, tree *fence.Tree, typ record.EventType) int {
	t.Helper()
	evs, err := tree.Log(bg, fence.LogFilter{Heartbeats: true})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range evs {
		if ev.Type == typ {
			n++
		}
	}
	return n
}

// staleSetup brings a fresh tree to a state where tok is a token that does
// not authorise on t1, and says what the refusal must name.
type staleSetup struct {
	name string
	// setup returns the token to show and the expected refusal; LostAt is
	// compared with the time of the event named by lostEvent.
	setup     func(t *testing.T, tree *fence.Tree) (tok uint64, want fence.StaleTokenError, lostEvent record.EventType)
	retryOnOp string // the op whose repeat is a retry
}

func end(t *testing.T, tree *fence.Tree, op string, tok uint64) {
	t.Helper()
	var err error
	req := fence.FencedRequest{ID: "t1", Token: tok, Agent: "a"}
	switch op {
	case "complete":
		_, err = tree.Complete(bg, req)
	case "release":
		_, err = tree.Release(bg, req)
	case "fail":
		_, err = tree.Fail(bg, req)
	case "revoke":
		_, err = tree.Revoke(bg, "t1", "operator", "test")
	}
	if err != nil {
		t.Fatalf("%s: %v", op, err)
	}
}

func staleSetups() []staleSetup {
	var out []staleSetup
	ended := []struct {
		op    string
		ev    record.EventType
		lost  string
		state record.State
	}{
		{"revoke", record.EvRevoke, "revoked", record.Available},
		{"complete", record.EvComplete, "completed", record.Done},
		{"release", record.EvRelease, "released", record.Available},
		{"fail", record.EvFail, "failed", record.Available},
	}
	for _, e := range ended {
		retry := e.op
		if e.op == "revoke" {
			retry = ""
		}
		out = append(out,
			staleSetup{name: "stale-" + e.lost, retryOnOp: retry,
				setup: func(t *testing.T, tree *fence.Tree) (uint64, fence.StaleTokenError, record.EventType) {
					c := claim(t, tree, "t1", "a")
					end(t, tree, e.op, c.Token)
					return c.Token, fence.StaleTokenError{Reason: fence.ReasonStaleToken, Task: "t1", Yours: c.Token, State: e.state, LostBy: e.lost}, e.ev
				}},
		)
		if e.state == record.Available {
			out = append(out, staleSetup{name: "stale-" + e.lost + "-then-claimed-by-b", retryOnOp: retry,
				setup: func(t *testing.T, tree *fence.Tree) (uint64, fence.StaleTokenError, record.EventType) {
					c := claim(t, tree, "t1", "a")
					end(t, tree, e.op, c.Token)
					b := claim(t, tree, "t1", "b")
					return c.Token, fence.StaleTokenError{Reason: fence.ReasonStaleToken, Task: "t1", Yours: c.Token,
						Current: b.Token, Holder: "b", State: record.Claimed, LostBy: e.lost}, e.ev
				}})
		}
	}
	out = append(out,
		staleSetup{name: "another-claims-token", setup: func(t *testing.T, tree *fence.Tree) (uint64, fence.StaleTokenError, record.EventType) {
			c1 := claim(t, tree, "t1", "a")
			c2 := claim(t, tree, "t2", "b")
			return c2.Token, fence.StaleTokenError{Reason: fence.ReasonNotHeld, Task: "t1", Yours: c2.Token, Current: c1.Token, Holder: "a", State: record.Claimed}, ""
		}},
		staleSetup{name: "another-claims-completed-token", setup: func(t *testing.T, tree *fence.Tree) (uint64, fence.StaleTokenError, record.EventType) {
			c2 := claim(t, tree, "t2", "b")
			if _, err := tree.Complete(bg, fence.FencedRequest{ID: "t2", Token: c2.Token}); err != nil {
				t.Fatal(err)
			}
			return c2.Token, fence.StaleTokenError{Reason: fence.ReasonNotHeld, Task: "t1", Yours: c2.Token, State: record.Available}, ""
		}},
		staleSetup{name: "never-issued-task-claimed", setup: func(t *testing.T, tree *fence.Tree) (uint64, fence.StaleTokenError, record.EventType) {
			c := claim(t, tree, "t1", "a")
			tok := c.Token + 12345
			return tok, fence.StaleTokenError{Reason: fence.ReasonNotHeld, Task: "t1", Yours: tok, Current: c.Token, Holder: "a", State: record.Claimed}, ""
		}},
		staleSetup{name: "never-issued-task-available", setup: func(t *testing.T, tree *fence.Tree) (uint64, fence.StaleTokenError, record.EventType) {
			st, err := tree.Status(bg)
			if err != nil {
				t.Fatal(err)
			}
			tok := st.LastToken + 1
			return tok, fence.StaleTokenError{Reason: fence.ReasonNotHeld, Task: "t1", Yours: tok, State: record.Available}, ""
		}},
	)
	return out
}

// Every token-checked call with a token that does not authorise is refused
// with the exact reason and details, and changes nothing; the one exception
// is the repeat of the call that ended the token's lease, which answers
// success and changes nothing either.
func TestTree_StaleTokenRefusalsChangeNothing(t *testing.T) {
	for _, s := range staleSetups() {
		for _, op := range fencedOps {
			t.Run(s.name+"/"+op.name, func(t *testing.T) {
				tree := newTree(t)
				add(t, tree, "t1", 0)
				add(t, tree, "t2", 0)
				tok, want, lostEv := s.setup(t, tree)
				if lostEv != "" {
					want.LostAt = eventOf(t, tree, "t1", lostEv).Time
				}
				before := snap(t, tree)
				err := op.call(tree, fence.FencedRequest{ID: "t1", Token: tok, Agent: "a"})
				unchanged(t, tree, before, op.name)
				if op.name == s.retryOnOp {
					if err != nil {
						t.Fatalf("retry of %s: %v", op.name, err)
					}
					return
				}
				se := staleErr(t, err)
				got := *se
				if !got.LostAt.Equal(want.LostAt) {
					t.Errorf("LostAt = %v, want %v", got.LostAt, want.LostAt)
				}
				got.LostAt, want.LostAt = time.Time{}, time.Time{}
				if want.Current != 0 { // held since the current lease's claim
					v, err := tree.Show(bg, "t1")
					if err != nil {
						t.Fatal(err)
					}
					if !got.HeldSince.Equal(v.Task.Lease.ClaimedAt) {
						t.Errorf("HeldSince = %v, want %v", got.HeldSince, v.Task.Lease.ClaimedAt)
					}
					got.HeldSince = time.Time{}
				}
				if got != want {
					t.Errorf("StaleTokenError =\n  %+v\nwant\n  %+v", got, want)
				}
			})
		}
	}
}

func TestTree_RetryAnswersSuccessOnce(t *testing.T) {
	for _, op := range []string{"complete", "release", "fail"} {
		t.Run(op, func(t *testing.T) {
			tree := newTree(t)
			add(t, tree, "t1", 0)
			c := claim(t, tree, "t1", "a")
			end(t, tree, op, c.Token)
			v, _ := tree.Show(bg, "t1")
			before := snap(t, tree)
			req := fence.FencedRequest{ID: "t1", Token: c.Token, Agent: "a"}
			var res fence.Result
			var err error
			switch op {
			case "complete":
				res, err = tree.Complete(bg, req)
			case "release":
				res, err = tree.Release(bg, req)
			case "fail":
				res, err = tree.Fail(bg, req)
			}
			if err != nil {
				t.Fatalf("second %s: %v", op, err)
			}
			if !res.Retry || res.Event != nil || res.MovedOn {
				t.Errorf("second %s: Retry = %v, Event = %v, MovedOn = %v; want a retry with no event, not moved on", op, res.Retry, res.Event, res.MovedOn)
			}
			if res.Task.State != v.Task.State || res.Path != tree.Path("t1", v.Task.State) || res.Task.Attempts != v.Task.Attempts {
				t.Errorf("second %s: result %+v (path %s), the task is %s", op, res.Task, res.Path, v.Task.State)
			}
			unchanged(t, tree, before, "retry")
			if n := countEvents(t, tree, record.EventType(op)); n != 1 {
				t.Errorf("%d %s events, want exactly 1", n, op)
			}
		})
	}
}

// The retry rule holds even after the task moved on: the repeat of the
// call that ended the lease answers success and leaves the new holder alone.
func TestTree_RetryAfterTaskMovedOn(t *testing.T) {
	tree := newTree(t)
	add(t, tree, "t1", 0)
	a := claim(t, tree, "t1", "a")
	end(t, tree, "release", a.Token)
	b := claim(t, tree, "t1", "b")
	before := snap(t, tree)
	res, err := tree.Release(bg, fence.FencedRequest{ID: "t1", Token: a.Token})
	if err != nil || !res.Retry {
		t.Fatalf("repeat of a's release: %+v, %v; want a retry", res, err)
	}
	// The answer to a dead token never carries the live one.
	if !res.MovedOn || res.Task.Lease != nil {
		t.Errorf("repeat of a's release: MovedOn = %v, Lease = %+v; want moved on, no lease (b's token must not reach a)", res.MovedOn, res.Task.Lease)
	}
	unchanged(t, tree, before, "retry after the task moved on")
	if _, err := tree.Verify(bg, fence.FencedRequest{ID: "t1", Token: b.Token}); err != nil {
		t.Errorf("b's token after a's retry: %v", err)
	}
}

func TestTree_OtherAgentWithValidToken(t *testing.T) {
	tree := newTree(t)
	add(t, tree, "t1", 0)
	c := claim(t, tree, "t1", "agent-a")
	req := fence.FencedRequest{ID: "t1", Token: c.Token, Agent: "agent-b"}
	if _, err := tree.Verify(bg, req); err != nil {
		t.Fatalf("Verify as another agent: %v", err)
	}
	hb, err := tree.Heartbeat(bg, req)
	if err != nil {
		t.Fatalf("Heartbeat as another agent: %v", err)
	}
	if hb.Event == nil || hb.Event.Agent != "agent-b" || hb.Task.Lease.Agent != "agent-a" {
		t.Errorf("heartbeat: event %+v, lease %+v; want the event to record agent-b, the lease to stay agent-a's", hb.Event, hb.Task.Lease)
	}
	res, err := tree.Complete(bg, req)
	if err != nil {
		t.Fatalf("Complete as another agent: %v", err)
	}
	if res.Task.State != record.Done || res.Event.Agent != "agent-b" {
		t.Errorf("complete: %+v", res)
	}
	if res.Task.Last == nil || res.Task.Last.Token != c.Token || res.Task.Last.Agent != "agent-a" || res.Task.Last.By != record.EvComplete {
		t.Errorf("Last = %+v", res.Task.Last)
	}
	// And with no agent at all, the holder's name is recorded.
	add(t, tree, "t2", 0)
	c2 := claim(t, tree, "t2", "agent-c")
	r2, err := tree.Release(bg, fence.FencedRequest{ID: "t2", Token: c2.Token})
	if err != nil {
		t.Fatal(err)
	}
	if r2.Event.Agent != "agent-c" {
		t.Errorf("release without an agent recorded %q, want the holder agent-c", r2.Event.Agent)
	}
}

func TestTree_HeartbeatExtends(t *testing.T) {
	tree := newTree(t)
	add(t, tree, "t1", 0)
	c, err := tree.Claim(bg, fence.ClaimRequest{ID: "t1", Agent: "a", TTL: 3 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	hb, err := tree.Heartbeat(bg, fence.FencedRequest{ID: "t1", Token: c.Token, TTL: 7 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if got := hb.Event.Deadline.Sub(hb.Event.Time); got != 7*time.Minute {
		t.Errorf("heartbeat --ttl 7m: lease extended by %v", got)
	}
	if !hb.Task.Lease.Deadline.Equal(*hb.Event.Deadline) || hb.Task.Lease.Token != c.Token {
		t.Errorf("lease after heartbeat = %+v", hb.Task.Lease)
	}
	// Without --ttl: by the claim's own lease length.
	hb, err = tree.Heartbeat(bg, fence.FencedRequest{ID: "t1", Token: c.Token})
	if err != nil {
		t.Fatal(err)
	}
	if got := hb.Event.Deadline.Sub(hb.Event.Time); got != 3*time.Minute {
		t.Errorf("heartbeat without --ttl: lease extended by %v, want the claim's 3m", got)
	}
	if n := countEvents(t, tree, record.EvHeartbeat); n != 2 {
		t.Errorf("%d heartbeat events, want 2", n)
	}
	// Heartbeats are hidden from the log unless asked for.
	evs, err := tree.Log(bg, fence.LogFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Type == record.EvHeartbeat {
			t.Errorf("Log without Heartbeats shows %+v", ev)
		}
	}
}

func TestTree_Attempts(t *testing.T) {
	tree := newTree(t)
	if _, err := tree.Add(bg, fence.AddRequest{ID: "t1", MaxAttempts: 2}); err != nil {
		t.Fatal(err)
	}
	step := func(op string, wantState record.State, wantAttempts int) {
		t.Helper()
		c := claim(t, tree, "t1", "a")
		end(t, tree, op, c.Token)
		v, err := tree.Show(bg, "t1")
		if err != nil {
			t.Fatal(err)
		}
		if v.Task.State != wantState || v.Task.Attempts != wantAttempts {
			t.Fatalf("after %s: %s with %d attempts, want %s with %d", op, v.Task.State, v.Task.Attempts, wantState, wantAttempts)
		}
		if _, err := os.Stat(tree.Path("t1", wantState)); err != nil {
			t.Errorf("after %s: file not in %s/: %v", op, wantState, err)
		}
	}
	step("release", record.Available, 0) // release does not count
	step("revoke", record.Available, 0)  // nor does revoke
	step("fail", record.Available, 1)
	step("release", record.Available, 1)
	step("fail", record.Failed, 2) // max attempts: dead letter
	if _, err := tree.Claim(bg, fence.ClaimRequest{Agent: "a"}); !errors.Is(err, fence.ErrNothingToClaim) {
		t.Errorf("claim with only a failed task: err = %v, want ErrNothingToClaim", err)
	}
	var na *fence.NotAvailableError
	if _, err := tree.Claim(bg, fence.ClaimRequest{ID: "t1", Agent: "a"}); !errors.As(err, &na) || na.State != record.Failed {
		t.Errorf("claim of a failed task: err = %v, want NotAvailableError{failed}", err)
	}
	res, err := tree.Requeue(bg, "t1", "operator", "try again")
	if err != nil {
		t.Fatal(err)
	}
	if res.Task.State != record.Available || res.Task.Attempts != 0 || res.Path != tree.Path("t1", record.Available) {
		t.Errorf("requeue: %+v", res)
	}
	if _, err := os.Stat(tree.Path("t1", record.Available)); err != nil {
		t.Errorf("requeued file not in available/: %v", err)
	}
	// Attempts start from zero again: one fail does not fail it.
	step("fail", record.Available, 1)
	step("complete", record.Done, 1)
	res, err = tree.Requeue(bg, "t1", "operator", "")
	if err != nil {
		t.Fatal(err)
	}
	if res.Task.State != record.Available || res.Task.Attempts != 0 {
		t.Errorf("requeue of a done task: %+v", res.Task)
	}
}

func TestTree_MaxAttemptsOne(t *testing.T) {
	tree := newTree(t)
	if _, err := tree.Add(bg, fence.AddRequest{ID: "t1", MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	c := claim(t, tree, "t1", "a")
	res, err := tree.Fail(bg, fence.FencedRequest{ID: "t1", Token: c.Token, Reason: "broken"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Task.State != record.Failed || res.Task.Attempts != 1 || res.Event.Reason != "broken" {
		t.Errorf("fail at max attempts 1: %+v", res)
	}
}

func TestTree_RevokeAndRequeueNotAvailable(t *testing.T) {
	tree := newTree(t)
	add(t, tree, "t1", 0)
	before := snap(t, tree)
	var na *fence.NotAvailableError
	if _, err := tree.Revoke(bg, "t1", "op", ""); !errors.As(err, &na) || !reflect.DeepEqual(*na, fence.NotAvailableError{Task: "t1", State: record.Available, Op: "revoke"}) {
		t.Errorf("revoke of an available task: err = %v", err)
	}
	if _, err := tree.Requeue(bg, "t1", "op", ""); !errors.As(err, &na) || !reflect.DeepEqual(*na, fence.NotAvailableError{Task: "t1", State: record.Available, Op: "requeue"}) {
		t.Errorf("requeue of an available task: err = %v", err)
	}
	unchanged(t, tree, before, "refused operator calls")
	c := claim(t, tree, "t1", "a")
	before = snap(t, tree)
	if _, err := tree.Requeue(bg, "t1", "op", ""); !errors.As(err, &na) || na.State != record.Claimed {
		t.Errorf("requeue of a claimed task: err = %v", err)
	}
	unchanged(t, tree, before, "requeue of a claimed task")
	res, err := tree.Revoke(bg, "t1", "operator", "stuck")
	if err != nil {
		t.Fatal(err)
	}
	if res.Task.State != record.Available || res.Task.Attempts != 0 || res.Event.Token != c.Token || res.Event.Reason != "stuck" {
		t.Errorf("revoke: %+v, event %+v", res.Task, res.Event)
	}
	if _, err := tree.Verify(bg, fence.FencedRequest{ID: "t1", Token: c.Token}); err == nil {
		t.Errorf("revoked token still verifies")
	}
}

func TestTree_NoSuchTask(t *testing.T) {
	tree := newTree(t)
	add(t, tree, "t1", 0)
	c := claim(t, tree, "t1", "a")
	before := snap(t, tree)
	check := func(what string, err error) {
		t.Helper()
		var ns *fence.NoSuchTaskError
		if !errors.As(err, &ns) || ns.Task != "ghost" {
			t.Errorf("%s of an unknown task: err = %v, want NoSuchTaskError{ghost}", what, err)
		}
	}
	for _, op := range fencedOps {
		// Even with a valid token (of another task): the unknown id comes first.
		check(op.name, op.call(tree, fence.FencedRequest{ID: "ghost", Token: c.Token}))
	}
	_, err := tree.Revoke(bg, "ghost", "op", "")
	check("revoke", err)
	_, err = tree.Requeue(bg, "ghost", "op", "")
	check("requeue", err)
	_, err = tree.Show(bg, "ghost")
	check("show", err)
	_, err = tree.Claim(bg, fence.ClaimRequest{ID: "ghost"})
	check("claim", err)
	unchanged(t, tree, before, "calls on an unknown task")
}

func TestTree_InvalidFencedRequests(t *testing.T) {
	tree := newTree(t)
	add(t, tree, "t1", 0)
	c := claim(t, tree, "t1", "a")
	before := snap(t, tree)
	for _, op := range fencedOps {
		for _, req := range []fence.FencedRequest{
			{ID: "t1", Token: 0},
			{ID: "", Token: c.Token},
			{ID: "../t1", Token: c.Token},
			{ID: "t1", Token: c.Token, TTL: -time.Second},
		} {
			if op.name == "claim-token" && (req.Token == 0 || req.ID == "" || req.TTL < 0) {
				continue // a claim without a token or id is a plain claim; fencedOps passes no TTL
			}
			err := op.call(tree, req)
			var ie *fence.InvalidInputError
			if !errors.As(err, &ie) {
				t.Errorf("%s %+v: err = %v, want InvalidInputError", op.name, req, err)
			}
		}
	}
	for _, f := range []fence.LogFilter{{Limit: -1}, {Task: "a/b"}} {
		if _, err := tree.Log(bg, f); err == nil {
			t.Errorf("Log(%+v) accepted", f)
		}
	}
	if _, err := tree.Claim(bg, fence.ClaimRequest{TTL: -time.Second}); err == nil {
		t.Errorf("claim with a negative TTL accepted")
	}
	if _, err := tree.Claim(bg, fence.ClaimRequest{Wait: -time.Second}); err == nil {
		t.Errorf("claim with a negative wait accepted")
	}
	unchanged(t, tree, before, "invalid requests")
}

func TestTree_StatusShowLog(t *testing.T) {
	tree := newTree(t)
	for _, id := range []string{"t1", "t2", "t3", "t4"} {
		add(t, tree, id, 0)
	}
	c1 := claim(t, tree, "t1", "a")
	c2 := claim(t, tree, "t2", "b")
	if _, err := tree.Complete(bg, fence.FencedRequest{ID: "t2", Token: c2.Token}); err != nil {
		t.Fatal(err)
	}
	c3 := claim(t, tree, "t3", "c")
	if _, err := tree.Heartbeat(bg, fence.FencedRequest{ID: "t3", Token: c3.Token}); err != nil {
		t.Fatal(err)
	}
	st, err := tree.Status(bg)
	if err != nil {
		t.Fatal(err)
	}
	want := map[record.State]int{record.Waiting: 0, record.Available: 1, record.Claimed: 2, record.Done: 1, record.Failed: 0}
	if !reflect.DeepEqual(st.Counts, want) {
		t.Errorf("Counts = %v, want %v", st.Counts, want)
	}
	if st.LastToken != c3.Token {
		t.Errorf("LastToken = %d, want the last claim's %d", st.LastToken, c3.Token)
	}
	leases := map[string]fence.LeaseView{}
	for _, l := range st.Leases {
		leases[l.Task] = l
	}
	if l := leases["t1"]; l.Agent != "a" || l.Token != c1.Token || l.Left <= 0 || l.Left > testDefaults.TTL {
		t.Errorf("lease of t1 = %+v", l)
	}
	if l := leases["t3"]; l.Agent != "c" || l.Token != c3.Token {
		t.Errorf("lease of t3 = %+v", l)
	}
	if len(st.Leases) != 2 {
		t.Errorf("Leases = %+v", st.Leases)
	}

	v, err := tree.Show(bg, "t3")
	if err != nil {
		t.Fatal(err)
	}
	var types []record.EventType
	for _, ev := range v.Events {
		types = append(types, ev.Type)
		if ev.Task != "t3" {
			t.Errorf("Show t3 lists an event of %s", ev.Task)
		}
	}
	if want := []record.EventType{record.EvAdd, record.EvClaim, record.EvHeartbeat}; !reflect.DeepEqual(types, want) {
		t.Errorf("Show events = %v, want %v (heartbeats included, oldest first)", types, want)
	}
	if v.Path != tree.Path("t3", record.Claimed) || v.Task.Lease == nil || v.Task.Lease.Agent != "c" {
		t.Errorf("Show = %+v", v)
	}

	all, err := tree.Log(bg, fence.LogFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 4+3+1 { // adds, claims, complete; the heartbeat hidden
		t.Errorf("Log has %d events, want 8", len(all))
	}
	for i := 1; i < len(all); i++ {
		if all[i].Seq <= all[i-1].Seq {
			t.Errorf("Log not oldest first: %d after %d", all[i].Seq, all[i-1].Seq)
		}
	}
	tail, err := tree.Log(bg, fence.LogFilter{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(tail) != 2 || tail[0].Seq != all[len(all)-2].Seq || tail[1].Seq != all[len(all)-1].Seq {
		t.Errorf("Log --limit 2 = %+v, want the newest two, oldest first", tail)
	}
	onlyT2, err := tree.Log(bg, fence.LogFilter{Task: "t2"})
	if err != nil {
		t.Fatal(err)
	}
	if len(onlyT2) != 3 {
		t.Errorf("Log --task t2 = %d events, want add, claim, complete", len(onlyT2))
	}
	since, err := tree.Log(bg, fence.LogFilter{Since: all[len(all)-1].Time.Add(time.Hour), Heartbeats: true})
	if err != nil || len(since) != 0 {
		t.Errorf("Log --since the future = %v, %v", since, err)
	}
}

func TestTree_TokensIncreaseAcrossClaims(t *testing.T) {
	tree := newTree(t)
	var last uint64
	for i := 0; i < 10; i++ {
		id := fmt.Sprintf("t%d", i%3)
		if i < 3 {
			add(t, tree, id, 0)
		}
		st, err := tree.Status(bg)
		if err != nil {
			t.Fatal(err)
		}
		c := claim(t, tree, id, "a")
		if c.Token <= last || c.Token <= st.LastToken {
			t.Fatalf("token %d not above the previous %d and the counter %d", c.Token, last, st.LastToken)
		}
		last = c.Token
		if _, err := tree.Release(bg, fence.FencedRequest{ID: id, Token: c.Token}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTree_ConcurrentClaimsAreUnique(t *testing.T) {
	tree := newTree(t)
	const tasks, workers = 40, 6
	for i := 0; i < tasks; i++ {
		add(t, tree, fmt.Sprintf("t%02d", i), 0)
	}
	var mu sync.Mutex
	got := map[string]int{}
	tokens := map[uint64]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			// Half the workers share the test's Tree, half open their own
			// (on the same clock: a lease-clock writer would take the test
			// clock's leases for leases of an earlier boot).
			tr := tree
			if w%2 == 1 {
				own, err := fence.Open(tree.Root(), fence.Options{Clock: testClock})
				if err != nil {
					errs <- err
					return
				}
				defer own.Close()
				tr = own
			}
			for {
				c, err := tr.Claim(bg, fence.ClaimRequest{Agent: fmt.Sprintf("w%d", w)})
				if errors.Is(err, fence.ErrNothingToClaim) {
					return
				}
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				got[c.Task.ID]++
				if tokens[c.Token] {
					errs <- fmt.Errorf("token %d issued twice", c.Token)
				}
				tokens[c.Token] = true
				mu.Unlock()
				if _, err := tr.Complete(bg, fence.FencedRequest{ID: c.Task.ID, Token: c.Token}); err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	within(t, "concurrent claims", wg.Wait)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(got) != tasks {
		t.Errorf("%d distinct tasks claimed, want %d", len(got), tasks)
	}
	for id, n := range got {
		if n != 1 {
			t.Errorf("task %s claimed %d times", id, n)
		}
	}
	st, err := tree.Status(bg)
	if err != nil {
		t.Fatal(err)
	}
	if st.Counts[record.Done] != tasks {
		t.Errorf("done = %d, want %d", st.Counts[record.Done], tasks)
	}
	if n := countEvents(t, tree, record.EvComplete); n != tasks {
		t.Errorf("%d complete events, want %d", n, tasks)
	}
}

func TestTree_ClaimWait(t *testing.T) {
	tree := newTree(t)
	type result struct {
		c   fence.ClaimResult
		err error
	}
	got := make(chan result, 1)
	started := time.Now()
	go func() {
		c, err := tree.Claim(bg, fence.ClaimRequest{Agent: "waiter", Wait: 20 * time.Second})
		got <- result{c, err}
	}()
	// Let the waiter find nothing at least once, then add from elsewhere.
	select {
	case r := <-got:
		t.Fatalf("claim --wait returned before any task existed: %+v, %v", r.c, r.err)
	case <-time.After(300 * time.Millisecond):
	}
	other, err := fence.Open(tree.Root(), fence.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Add(bg, fence.AddRequest{ID: "late", Content: strings.NewReader("content of late")}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("claim --wait: %v", r.err)
		}
		if r.c.Task.ID != "late" || r.c.Agent != "waiter" {
			t.Errorf("claim --wait got %+v", r.c)
		}
		if time.Since(started) > 15*time.Second {
			t.Errorf("claim --wait took %v: it should return soon after the add", time.Since(started))
		}
	case <-time.After(15 * time.Second):
		t.Fatal("claim --wait did not return after a task was added")
	}
	fileAt(t, tree, "late", record.Claimed)
}

func TestTree_ClaimWaitForNamedTask(t *testing.T) {
	tree := newTree(t)
	add(t, tree, "t1", 0)
	a := claim(t, tree, "t1", "a")
	got := make(chan error, 1)
	var res fence.ClaimResult
	go func() {
		var err error
		res, err = tree.Claim(bg, fence.ClaimRequest{ID: "t1", Agent: "b", Wait: 20 * time.Second})
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("claim --wait of a held task returned at once: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := tree.Release(bg, fence.FencedRequest{ID: "t1", Token: a.Token}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("claim --wait after the release: %v", err)
		}
		if res.Task.ID != "t1" || res.Agent != "b" || res.Token <= a.Token {
			t.Errorf("claim --wait got %+v", res)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("claim --wait did not return after the task was released")
	}
}

func TestTree_ClaimWaitGivesUp(t *testing.T) {
	tree := newTree(t)
	start := time.Now()
	_, err := tree.Claim(bg, fence.ClaimRequest{Agent: "a", Wait: 250 * time.Millisecond})
	if !errors.Is(err, fence.ErrNothingToClaim) {
		t.Fatalf("err = %v, want ErrNothingToClaim", err)
	}
	if waited := time.Since(start); waited < 250*time.Millisecond {
		t.Errorf("gave up after %v, before the wait ended", waited)
	}
	// A cancelled context ends the wait early.
	ctx, cancel := context.WithCancel(bg)
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	within(t, "claim --wait with a cancelled context", func() {
		_, err = tree.Claim(ctx, fence.ClaimRequest{Agent: "a", Wait: time.Hour})
	})
	if err == nil {
		t.Errorf("claim with a cancelled context succeeded")
	}
}

func TestTree_CancelledContextChangesNothing(t *testing.T) {
	tree := newTree(t)
	add(t, tree, "t1", 0)
	before := snap(t, tree)
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if _, err := tree.Claim(ctx, fence.ClaimRequest{Agent: "a"}); !errors.Is(err, context.Canceled) {
		t.Errorf("claim: err = %v, want context.Canceled", err)
	}
	if _, err := tree.Add(ctx, fence.AddRequest{ID: "t2"}); !errors.Is(err, context.Canceled) {
		t.Errorf("add: err = %v, want context.Canceled", err)
	}
	if _, err := tree.Status(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("status: err = %v, want context.Canceled", err)
	}
	unchanged(t, tree, before, "cancelled calls")
}

func TestTree_Busy(t *testing.T) {
	tree := newTree(t)
	add(t, tree, "t1", 0)
	impatient, err := fence.Open(tree.Root(), fence.Options{Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer impatient.Close()
	l, err := boltstore.AcquireLock(filepath.Join(tree.Root(), ".fence", boltstore.LockName), true, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := impatient.Claim(bg, fence.ClaimRequest{Agent: "a"}); !errors.Is(err, fence.ErrBusy) {
		t.Errorf("claim while the lock is held: err = %v, want ErrBusy", err)
	}
	if _, err := impatient.Status(bg); !errors.Is(err, fence.ErrBusy) {
		t.Errorf("status while the lock is held: err = %v, want ErrBusy", err)
	}
	// A refused add leaves nothing staged (checked at cleanup) and no task.
	if _, err := impatient.Add(bg, fence.AddRequest{ID: "t2", Content: strings.NewReader("x")}); !errors.Is(err, fence.ErrBusy) {
		t.Errorf("add while the lock is held: err = %v, want ErrBusy", err)
	}
	if left, _ := os.ReadDir(filepath.Join(tree.Root(), ".fence", "tmp")); len(left) != 0 {
		t.Errorf("a busy add left %v staged", names(left))
	}
	l.Release()
	if _, err := impatient.Claim(bg, fence.ClaimRequest{Agent: "a"}); err != nil {
		t.Errorf("claim after the lock was released: %v", err)
	}
}

func TestTree_AdoptFromInbox(t *testing.T) {
	tree, n := newTreeWith(t, testDefaults, fence.Options{})
	inbox := filepath.Join(tree.Root(), "inbox")
	// Maildir-style: write under a dot name, rename in.
	tmp := filepath.Join(inbox, ".dropped.tmp")
	if err := os.WriteFile(tmp, []byte("content of dropped"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(inbox, "dropped")); err != nil {
		t.Fatal(err)
	}
	// Readers do not adopt.
	st, err := tree.Status(bg)
	if err != nil {
		t.Fatal(err)
	}
	if st.Counts[record.Available] != 0 {
		t.Errorf("a reader adopted the inbox: %v", st.Counts)
	}
	if _, err := os.Stat(filepath.Join(inbox, "dropped")); err != nil {
		t.Errorf("file left the inbox on a read: %v", err)
	}
	// The next writer does, even one that has nothing else to do.
	if _, err := tree.Reap(bg, false); err != nil {
		t.Fatal(err)
	}
	if _, ok := n.of(fence.NoticeAdopted)["dropped"]; !ok {
		t.Errorf("no adopted notice: %+v", n.list)
	}
	fileAt(t, tree, "dropped", record.Available)
	if _, err := os.Lstat(filepath.Join(inbox, "dropped")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("adopted file still in inbox/: %v", err)
	}
	v, err := tree.Show(bg, "dropped")
	if err != nil {
		t.Fatal(err)
	}
	if v.Task.State != record.Available || v.Task.MaxAttempts != testDefaults.MaxAttempts {
		t.Errorf("adopted task = %+v", v.Task)
	}
	if len(v.Events) != 1 || v.Events[0].Type != record.EvAdopt || v.Events[0].Source != "inbox" {
		t.Errorf("adopted task's events = %+v", v.Events)
	}
	if c := claim(t, tree, "", "a"); c.Task.ID != "dropped" {
		t.Errorf("claimed %s", c.Task.ID)
	}
}

func TestTree_ClaimAdoptsInboxFirst(t *testing.T) {
	tree := newTree(t)
	if err := os.WriteFile(filepath.Join(tree.Root(), "inbox", "fresh"), []byte("content of fresh"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := claim(t, tree, "", "a")
	if c.Task.ID != "fresh" {
		t.Errorf("claim after a drop into inbox/ got %q", c.Task.ID)
	}
	fileAt(t, tree, "fresh", record.Claimed)
}

func TestTree_AdoptRejectsAndLeavesInPlace(t *testing.T) {
	tree, n := newTreeWith(t, testDefaults, fence.Options{})
	inbox := filepath.Join(tree.Root(), "inbox")
	outside := filepath.Join(t.TempDir(), "target")
	if err := os.WriteFile(outside, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	mk := map[string]func(p string) error{
		"bad name": func(p string) error { return os.WriteFile(p, nil, 0o644) },
		"-dash":    func(p string) error { return os.WriteFile(p, nil, 0o644) },
		"link":     func(p string) error { return os.Symlink(outside, p) },
		"pipe":     func(p string) error { return syscall.Mkfifo(p, 0o644) },
		"sub":      func(p string) error { return os.Mkdir(p, 0o755) },
	}
	modes := map[string]fs.FileMode{}
	for name, f := range mk {
		p := filepath.Join(inbox, name)
		if err := f(p); err != nil {
			t.Fatalf("make %s: %v", name, err)
		}
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		modes[name] = fi.Mode().Type()
	}
	if err := os.WriteFile(filepath.Join(inbox, ".partial"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	within(t, "a writer with odd entries in inbox/", func() {
		if _, err := tree.Add(bg, fence.AddRequest{ID: "t1", Content: strings.NewReader("content of t1")}); err != nil {
			t.Errorf("Add with odd entries in inbox/: %v", err)
		}
	})
	rejected := n.of(fence.NoticeInboxRejected)
	for name := range mk {
		if x, ok := rejected[name]; !ok || x.Detail == "" {
			t.Errorf("%q not reported as rejected: %+v", name, n.list)
		}
		fi, err := os.Lstat(filepath.Join(inbox, name))
		if err != nil {
			t.Errorf("%q removed from inbox/: %v", name, err)
		} else if fi.Mode().Type() != modes[name] {
			t.Errorf("%q changed type: %v, was %v", name, fi.Mode().Type(), modes[name])
		}
	}
	if _, ok := rejected[".partial"]; ok {
		t.Errorf("a write in progress (.partial) was reported")
	}
	if _, err := os.Lstat(filepath.Join(inbox, ".partial")); err != nil {
		t.Errorf(".partial removed: %v", err)
	}
	if len(n.of(fence.NoticeAdopted)) != 0 {
		t.Errorf("adopted: %+v", n.of(fence.NoticeAdopted))
	}
	if b, err := os.ReadFile(outside); err != nil || string(b) != "x" {
		t.Errorf("the symlink's target was touched: %q, %v", b, err)
	}
	st, _ := tree.Status(bg)
	if st.Counts[record.Available] != 1 {
		t.Errorf("counts = %v, want only t1", st.Counts)
	}
}

func TestTree_AdoptDuplicateLeftInInbox(t *testing.T) {
	tree, n := newTreeWith(t, testDefaults, fence.Options{})
	add(t, tree, "t1", 0)
	dup := filepath.Join(tree.Root(), "inbox", "t1")
	if err := os.WriteFile(dup, []byte("another t1"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := snap(t, tree)
	if _, err := tree.Reap(bg, false); err != nil {
		t.Fatal(err)
	}
	if _, ok := n.of(fence.NoticeInboxDuplicate)["t1"]; !ok {
		t.Errorf("no inbox_duplicate notice: %+v", n.list)
	}
	if b, err := os.ReadFile(dup); err != nil || string(b) != "another t1" {
		t.Errorf("duplicate in inbox/ = %q, %v; want it left alone", b, err)
	}
	unchanged(t, tree, before, "duplicate in inbox")
	fileAt(t, tree, "t1", record.Available)
}

// moveBack moves id's file from state from back to state to by hand, as a
// crash between a commit and its rename leaves it.
func moveBack(t *testing.T, tree *fence.Tree, id string, from, to record.State) {
	t.Helper()
	if err := os.Rename(tree.Path(id, from), tree.Path(id, to)); err != nil {
		t.Fatal(err)
	}
}

// nextWriter is the next process to write after tree's last commit: a
// fresh Tree (the one that committed skips the check of its own commit)
// that adds a task and returns what it noticed on the way.
func nextWriter(t *testing.T, tree *fence.Tree) *notices {
	t.Helper()
	var notes notices
	next, err := fence.Open(tree.Root(), fence.Options{Notify: notes.add, Clock: testClock})
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	add(t, next, "next-writer", 0)
	return &notes
}

// The mark of an older commit must not vouch for the last one: a writer
// that died after its commit left the previous writer's mark behind.
func TestTree_SettleIgnoresMarkOfOlderCommit(t *testing.T) {
	tree, _ := newTreeWith(t, testDefaults, fence.Options{})
	add(t, tree, "t1", 0)
	markPath := filepath.Join(tree.Root(), ".fence", fsmirror.MarkName)
	older, err := os.ReadFile(markPath)
	if err != nil || len(older) == 0 {
		t.Fatalf("no mark after a commit: %q, %v", older, err)
	}
	claim(t, tree, "t1", "a")
	if now, _ := os.ReadFile(markPath); string(now) == string(older) {
		t.Fatalf("the mark did not change with the claim's commit: %q", now)
	}
	// The claim's process "died" after its commit: file not moved, mark
	// still the one from before.
	moveBack(t, tree, "t1", record.Claimed, record.Available)
	if err := os.WriteFile(markPath, older, 0o600); err != nil {
		t.Fatal(err)
	}
	if notes := nextWriter(t, tree); !notes.has(fence.NoticeSettled, "t1") {
		t.Errorf("no settled notice: %+v", notes.list)
	}
	fileAt(t, tree, "t1", record.Claimed)
}

// A mark that names the last commit spares the next process the check:
// here a file moved by hand after a complete claim stays where it is (the
// check would have put it back), which shows the check was skipped.
func TestTree_SettleTrustsMarkOfLastCommit(t *testing.T) {
	tree, _ := newTreeWith(t, testDefaults, fence.Options{})
	add(t, tree, "t1", 0)
	claim(t, tree, "t1", "a")
	moveBack(t, tree, "t1", record.Claimed, record.Available)
	if notes := nextWriter(t, tree); notes.has(fence.NoticeSettled, "t1") {
		t.Errorf("settled t1 although the mark vouched for the last commit: %+v", notes.list)
	}
	// Put it back so the helpers' invariant check at cleanup holds.
	moveBack(t, tree, "t1", record.Available, record.Claimed)
}

func TestTree_SettleFinishesInterruptedMove(t *testing.T) {
	tree, _ := newTreeWith(t, testDefaults, fence.Options{})
	add(t, tree, "t1", 0)
	c := claim(t, tree, "t1", "a")
	// As if the claim's process died after the commit, before the rename:
	// the file is where it was, and that process never wrote the mark that
	// says its moves are done.
	moveBack(t, tree, "t1", record.Claimed, record.Available)
	if err := os.Remove(filepath.Join(tree.Root(), ".fence", fsmirror.MarkName)); err != nil {
		t.Fatal(err)
	}
	// Any writer finishes the last commit first.
	if notes := nextWriter(t, tree); !notes.has(fence.NoticeSettled, "t1") {
		t.Errorf("no settled notice: %+v", notes.list)
	}
	fileAt(t, tree, "t1", record.Claimed)
	if _, err := tree.Verify(bg, fence.FencedRequest{ID: "t1", Token: c.Token}); err != nil {
		t.Errorf("token after settle: %v", err)
	}
}

func TestTree_ReplayRepairsMisplacedFiles(t *testing.T) {
	tree := newTree(t)
	add(t, tree, "t1", 0)
	add(t, tree, "t2", 0)
	add(t, tree, "t3", 0)
	claim(t, tree, "t2", "a")
	add(t, tree, "t4", 0) // so that t2's claim is not the last commit
	mv := func(id string, from, to record.State) {
		if err := os.Rename(tree.Path(id, from), tree.Path(id, to)); err != nil {
			t.Fatal(err)
		}
	}
	mv("t1", record.Available, record.Done)
	mv("t2", record.Claimed, record.Failed)
	// A stray copy and a stray file.
	if err := os.WriteFile(tree.Path("t3", record.Failed), []byte("copy"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tree.Path("stray", record.Claimed), []byte("content of stray"), 0o644); err != nil {
		t.Fatal(err)
	}

	check, err := tree.Replay(bg, true)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]fence.FindingKind{}
	for _, f := range check.Findings {
		kinds[f.Task] = f.Kind
		if f.Fixed {
			t.Errorf("replay --check fixed %+v", f)
		}
	}
	if want := map[string]fence.FindingKind{"t1": fence.FindingMisplaced, "t2": fence.FindingMisplaced, "t3": fence.FindingDuplicate, "stray": fence.FindingUnknownFile}; !reflect.DeepEqual(kinds, want) {
		t.Errorf("replay --check findings = %v, want %v", kinds, want)
	}
	if _, err := os.Stat(tree.Path("t1", record.Done)); err != nil {
		t.Errorf("replay --check moved a file: %v", err)
	}

	rep, err := tree.Replay(bg, false)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Unfixed() != 0 || len(rep.Findings) != 4 {
		t.Errorf("replay: %+v", rep)
	}
	fileAt(t, tree, "t1", record.Available)
	fileAt(t, tree, "t2", record.Claimed)
	fileAt(t, tree, "t3", record.Available)
	fileAt(t, tree, "stray", record.Available) // adopted; claimed/ files have no lease
	if _, err := os.Lstat(tree.Path("t3", record.Failed)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("second copy of t3 still in failed/: %v", err)
	}
	q, err := os.ReadDir(filepath.Join(tree.Root(), ".fence", "quarantine"))
	if err != nil || len(q) != 1 {
		t.Errorf("quarantine = %v, %v; want the copy of t3", names(q), err)
	}
	again, err := tree.Replay(bg, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Findings) != 0 {
		t.Errorf("second replay found %+v", again.Findings)
	}
}

func TestTree_ReplayReportsInvalidEntries(t *testing.T) {
	tree := newTree(t)
	link := filepath.Join(tree.Root(), "done", "link")
	if err := os.Symlink("/etc/passwd", link); err != nil {
		t.Fatal(err)
	}
	rep, err := tree.Replay(bg, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Findings) != 1 || rep.Findings[0].Kind != fence.FindingInvalidEntry || rep.Findings[0].Fixed || rep.Unfixed() != 1 {
		t.Errorf("replay with a symlink in done/: %+v", rep.Findings)
	}
	if _, err := os.Lstat(link); err != nil {
		t.Errorf("symlink removed: %v", err)
	}
	os.Remove(link) // leave the tree clean for the invariant check
}

func TestTree_ReplayRebuildsRecords(t *testing.T) {
	tree := newTree(t)
	add(t, tree, "t1", 0)
	c := claim(t, tree, "t1", "a")
	// Damage a derived record behind fencectl's back.
	behindTheBack(t, tree, func(tx journal.Tx) error {
		rec, _, err := tx.Task("t1")
		if err != nil {
			return err
		}
		bad := rec
		bad.Attempts = 7
		return tx.PutTask(&rec, bad)
	})
	check, err := tree.Replay(bg, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(check.Findings) == 0 || check.Findings[0].Kind != fence.FindingRecordMismatch {
		t.Fatalf("replay --check: %+v", check.Findings)
	}
	if _, err := tree.Replay(bg, false); err != nil {
		t.Fatal(err)
	}
	v, _ := tree.Show(bg, "t1")
	if v.Task.Attempts != 0 || v.Task.Lease == nil || v.Task.Lease.Token != c.Token {
		t.Errorf("record after replay = %+v", v.Task)
	}
	if again, _ := tree.Replay(bg, true); len(again.Findings) != 0 {
		t.Errorf("after replay: %+v", again.Findings)
	}
}

// A lease of the longest duration a --ttl can hold runs past the year 2262;
// it must not be taken for an expired one by the next claim's reaping.
func TestTree_HugeTTLIsNotReaped(t *testing.T) {
	tree := newTree(t)
	add(t, tree, "t1", 0)
	add(t, tree, "t2", 0)
	// Beyond MaxTTL the claim is refused as bad input and nothing changes.
	before := snap(t, tree)
	_, err := tree.Claim(bg, fence.ClaimRequest{ID: "t1", Agent: "a", TTL: time.Duration(math.MaxInt64)})
	var inv *fence.InvalidInputError
	if !errors.As(err, &inv) {
		t.Fatalf("Claim with TTL MaxInt64: err = %v, want *InvalidInputError", err)
	}
	unchanged(t, tree, before, "claim with a TTL beyond MaxTTL")
	// The longest allowed lease is live, and the next claim does not reap it.
	c1, err := tree.Claim(bg, fence.ClaimRequest{ID: "t1", Agent: "a", TTL: fence.MaxTTL})
	if err != nil {
		t.Fatal(err)
	}
	c2 := claim(t, tree, "t2", "b")
	if len(c2.Reaped) != 0 {
		t.Errorf("the next claim reaped a live lease: %+v (deadline %v)", c2.Reaped, c1.Deadline)
	}
	if _, err := tree.Verify(bg, fence.FencedRequest{ID: "t1", Token: c1.Token}); err != nil {
		t.Errorf("Verify after the next claim: %v", err)
	}
}

// Two Trees on one directory stand for two processes. Each parks its
// journal handle between writes; every time the other one has committed
// in between, the parked handle must reopen the journal at Resume, or its
// stale freelist would hand out pages the other one is using.
func TestTree_InterleavedWritersReopenStaleHandle(t *testing.T) {
	a, _ := newTreeWith(t, testDefaults, fence.Options{})
	b, err := fence.Open(a.Root(), fence.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	trees := []*fence.Tree{a, b}
	for i := 0; i < 20; i++ {
		add(t, trees[i%2], fmt.Sprintf("t%02d", i), 0)
	}
	for i := 0; i < 20; i++ {
		w, other := trees[i%2], trees[(i+1)%2]
		c := claim(t, w, "", fmt.Sprintf("agent-%d", i%2))
		// The other handle completes it: a commit between two of w's.
		if _, err := other.Complete(bg, fence.FencedRequest{ID: c.Task.ID, Token: c.Token}); err != nil {
			t.Fatalf("round %d: complete %s through the other tree: %v", i, c.Task.ID, err)
		}
		fileAt(t, w, c.Task.ID, record.Done)
	}
	st, err := a.Status(bg)
	if err != nil {
		t.Fatal(err)
	}
	if st.Counts[record.Done] != 20 || st.Counts[record.Available] != 0 {
		t.Errorf("counts = %v; want 20 done", st.Counts)
	}
}

// CloseAtExit holds nothing back: right after it, another handle on the
// tree (another process, in real use) writes without waiting.
func TestTree_CloseAtExitLeavesNoLock(t *testing.T) {
	tree, _ := newTreeWith(t, testDefaults, fence.Options{})
	add(t, tree, "t1", 0)
	first, err := fence.Open(tree.Root(), fence.Options{})
	if err != nil {
		t.Fatal(err)
	}
	claim(t, first, "t1", "a")
	if err := first.CloseAtExit(); err != nil {
		t.Fatalf("CloseAtExit: %v", err)
	}
	// A timeout of a nanosecond: any lock still held makes this busy.
	impatient, err := fence.Open(tree.Root(), fence.Options{Timeout: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	defer impatient.Close()
	if _, err := impatient.Add(bg, fence.AddRequest{ID: "t2"}); err != nil {
		t.Fatalf("write with no wait after CloseAtExit: %v", err)
	}
}

// A Tree keeps its last read handle parked for the next read (a lease
// keeper reads on every journal change). Every read must still see what
// other handles (other processes) committed meanwhile, including a journal
// that grew past what the parked handle had mapped.
func TestTree_ReadsSeeOtherWritersThroughTheParkedReader(t *testing.T) {
	tree := newTree(t)
	add(t, tree, "mine", 0)
	if v, err := tree.Show(bg, "mine"); err != nil || v.Task.State != record.Available {
		t.Fatalf("show mine: %+v, %v", v.Task.State, err)
	}
	other, err := fence.Open(tree.Root(), fence.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	claim(t, other, "mine", "elsewhere")
	if v, err := tree.Show(bg, "mine"); err != nil || v.Task.State != record.Claimed {
		t.Fatalf("show mine after another handle claimed it: %v, %v", v.Task.State, err)
	}
	big := strings.Repeat("x", 100)
	for i := range 400 {
		if _, err := other.Add(bg, fence.AddRequest{ID: fmt.Sprintf("t%03d-%s", i, big)}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := tree.Status(bg)
	if err != nil {
		t.Fatal(err)
	}
	if n := st.Counts[record.Available]; n != 400 {
		t.Errorf("status after another handle added 400 tasks: %d available", n)
	}
}

// Replay compares a folded task's stored record with its folded one
// without decoding both: a stored record that differs, a folded record
// with no stored record and a folded task changed since (requeued) must
// each still be told apart from the folded records that agree.
func TestTree_ReplayComparesFoldedRecords(t *testing.T) {
	tree := newTree(t)
	for _, id := range []string{"t1", "t2", "t3", "t4"} {
		add(t, tree, id, 0)
		c := claim(t, tree, id, "a")
		if _, err := tree.Complete(bg, fence.FencedRequest{ID: id, Token: c.Token}); err != nil {
			t.Fatal(err)
		}
	}
	if rep, err := tree.Compact(bg, fence.CompactRequest{Agent: "test"}); err != nil || rep.Tasks != 4 {
		t.Fatalf("compact: %+v, %v", rep, err)
	}
	if _, err := tree.Requeue(bg, "t4", "test", ""); err != nil {
		t.Fatal(err)
	}
	if check, err := tree.Replay(bg, true); err != nil || len(check.Findings) != 0 {
		t.Fatalf("replay --check after compact: %+v, %v", check.Findings, err)
	}
	behindTheBack(t, tree, func(tx journal.Tx) error {
		rec, _, err := tx.Task("t2")
		if err != nil {
			return err
		}
		bad := rec
		bad.Attempts = 7
		if err := tx.PutTask(&rec, bad); err != nil {
			return err
		}
		ghost := rec
		ghost.ID = "ghost"
		return tx.Fold(ghost, rec.Seq)
	})
	check, err := tree.Replay(bg, true)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]fence.FindingKind{}
	for _, f := range check.Findings {
		if f.Kind == fence.FindingRecordMismatch || f.Kind == fence.FindingRecordMissing {
			got[f.Task] = f.Kind
		}
	}
	want := map[string]fence.FindingKind{"t2": fence.FindingRecordMismatch, "ghost": fence.FindingRecordMissing}
	if !maps.Equal(got, want) {
		t.Fatalf("replay --check: record findings %v, want %v (all: %+v)", got, want, check.Findings)
	}
	if _, err := tree.Replay(bg, false); err != nil {
		t.Fatal(err)
	}
	if v, _ := tree.Show(bg, "t2"); v.Task.Attempts != 0 || v.Task.State != record.Done {
		t.Errorf("t2 after replay: %s with %d attempts, want the folded record: done with 0", v.Task.State, v.Task.Attempts)
	}
	if again, _ := tree.Replay(bg, true); len(again.Findings) != 0 {
		t.Errorf("after replay: %+v", again.Findings)
	}
}

// behindTheBack commits fn to tree's journal directly, as damage done
// behind fencectl's back.
func behindTheBack(t *testing.T, tree *fence.Tree, fn func(journal.Tx) error) {
	t.Helper()
	db, err := boltstore.Open(filepath.Join(tree.Root(), ".fence"), journal.OpenOptions{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(fn)
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
}

// A long-lived Tree stops reading an inbox/ it found empty (fsmirror's
// WatchQuiet): whatever is dropped there later, in any way, is still
// adopted by the next claim, and a file staged by a dead process is still
// swept.
func TestClaim_QuietInboxStillAdopts(t *testing.T) {
	tree := newTree(t)
	inbox := filepath.Join(tree.Root(), "inbox")
	// Grown, as by a big drop adopted before: only such a directory is
	// worth a watch.
	for i := range 2000 {
		if err := os.WriteFile(filepath.Join(inbox, fmt.Sprintf(".grow-%04d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2000 {
		if err := os.Remove(filepath.Join(inbox, fmt.Sprintf(".grow-%04d", i))); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	for range 4 { // the watch comes with the second listing
		if _, err := tree.Claim(ctx, fence.ClaimRequest{Agent: "a"}); !errors.Is(err, fence.ErrNothingToClaim) {
			t.Fatalf("claim on an empty tree: %v", err)
		}
	}
	drops := []func(name string) error{
		func(name string) error { return os.WriteFile(filepath.Join(inbox, name), []byte(name), 0o644) },
		func(name string) error {
			src := filepath.Join(t.TempDir(), name)
			if err := os.WriteFile(src, []byte(name), 0o644); err != nil {
				return err
			}
			return os.Rename(src, filepath.Join(inbox, name))
		},
	}
	for i, drop := range drops {
		id := fmt.Sprintf("dropped-%d", i)
		if err := drop(id); err != nil {
			t.Fatal(err)
		}
		c, err := tree.Claim(ctx, fence.ClaimRequest{Agent: "a"})
		if err != nil || c.Task.ID != id {
			t.Fatalf("claim after dropping %s: %+v, %v", id, c.Task.ID, err)
		}
		if _, err := tree.Complete(ctx, fence.FencedRequest{ID: id, Token: c.Token}); err != nil {
			t.Fatal(err)
		}
		if _, err := tree.Claim(ctx, fence.ClaimRequest{Agent: "a"}); !errors.Is(err, fence.ErrNothingToClaim) {
			t.Fatalf("claim after %s was done: %v", id, err)
		}
	}
}

package fence_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal"
	etcdstore "github.com/fencectl/fencectl/journal/etcd"
	"github.com/fencectl/fencectl/journal/etcd/etcdtest"
	"github.com/fencectl/fencectl/journal/record"
)

// Fault tests of the etcd journal (issue 11): a real embedded cluster,
// agents as goroutines each with a Tree (and so an etcd client) of its
// own, racing on one tree while a fault strikes. Whatever happens, nothing
// acknowledged is lost and nothing is done twice.

// etcdRig is a tree whose journal is in an embedded etcd cluster.
type etcdRig struct {
	c    *etcdtest.Cluster
	root string
	cfg  journal.Config
}

func newEtcdRig(t *testing.T, members int, d record.Defaults) *etcdRig {
	t.Helper()
	c := etcdtest.Start(t, members)
	r := &etcdRig{c: c, root: filepath.Join(t.TempDir(), "tree"), cfg: journal.Config{Backend: "etcd", Endpoints: c.Endpoints(), Prefix: "/faults"}}
	if _, err := fence.InitTree(r.root, d, fence.Options{Journal: &r.cfg}); err != nil {
		t.Fatalf("InitTree on etcd: %v", err)
	}
	return r
}

// open opens the tree as an agent would: its own client, from the tree's
// config (every member), or on the given endpoints only.
func (r *etcdRig) open(t *testing.T, timeout time.Duration, endpoints ...string) *fence.Tree {
	t.Helper()
	o := fence.Options{Timeout: timeout}
	if len(endpoints) > 0 {
		cfg := r.cfg
		cfg.Endpoints = endpoints
		b, err := etcdstore.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		o.Backend = b
	}
	tree, err := fence.Open(r.root, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { tree.Close() })
	return tree
}

// client is a plain etcd client on the whole cluster, for the faults that
// need one (compaction).
func (r *etcdRig) client(t *testing.T) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: r.c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// untilOK retries f while it answers busy (the cluster unreachable or
// electing), within a generous bound; it counts the busy answers.
func untilOK(busy *atomic.Int64, f func() error) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := f()
		if err == nil || !errors.Is(err, fence.ErrBusy) || time.Now().After(deadline) {
			return err
		}
		busy.Add(1)
		time.Sleep(20 * time.Millisecond)
	}
}

// raceReport is what a race acknowledged.
type raceReport struct {
	acked map[string]uint64 // task → the token whose complete was acknowledged
	busy  int64             // busy answers retried
	took  time.Duration
}

// race adds n tasks and runs agents, each with its own Tree, that claim
// the next task and complete it until nothing is left. A claim is retried
// with its request id, so a claim committed but not answered (the member
// died mid-call) is handed back, not left to expire; a complete is retried
// with its token, which answers success once it has committed. fault runs
// beside the agents and receives one value per acknowledged complete.
func (r *etcdRig) race(t *testing.T, agents, n int, fault func(acks <-chan struct{})) raceReport {
	t.Helper()
	setup := r.open(t, 10*time.Second)
	for i := range n {
		add(t, setup, fmt.Sprintf("t%02d", i), int64(i%3))
	}
	var (
		mu   sync.Mutex
		rep  = raceReport{acked: map[string]uint64{}}
		busy atomic.Int64
		wg   sync.WaitGroup
	)
	acks := make(chan struct{}, n)
	faultDone := make(chan struct{})
	go func() { defer close(faultDone); fault(acks) }()
	start := time.Now()
	for a := range agents {
		tree := r.open(t, 3*time.Second)
		agent := fmt.Sprintf("agent%d", a)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				var c fence.ClaimResult
				err := untilOK(&busy, func() (err error) {
					c, err = tree.Claim(bg, fence.ClaimRequest{Agent: agent, TTL: time.Minute, RequestID: fmt.Sprintf("r%d", k)})
					return err
				})
				if errors.Is(err, fence.ErrNothingToClaim) {
					return
				}
				if err != nil {
					t.Errorf("%s: claim: %v", agent, err)
					return
				}
				err = untilOK(&busy, func() error {
					_, err := tree.Complete(bg, fence.FencedRequest{ID: c.Task.ID, Token: c.Token, Agent: agent})
					return err
				})
				if err != nil {
					t.Errorf("%s: complete %s (token %d): %v", agent, c.Task.ID, c.Token, err)
					return
				}
				mu.Lock()
				if tok, twice := rep.acked[c.Task.ID]; twice {
					t.Errorf("task %s completed twice: token %d, then %d by %s", c.Task.ID, tok, c.Token, agent)
				}
				rep.acked[c.Task.ID] = c.Token
				mu.Unlock()
				acks <- struct{}{}
			}
		}()
	}
	wg.Wait()
	rep.took = time.Since(start)
	close(acks)
	<-faultDone
	rep.busy = busy.Load()
	r.checkRace(t, n, rep)
	return rep
}

// checkRace checks, through a fresh Tree, that every task is done exactly
// once, by the complete that was acknowledged, and the tree's invariants
// (replay --check clean, claim tokens strictly increasing in log order).
func (r *etcdRig) checkRace(t *testing.T, n int, rep raceReport) {
	t.Helper()
	tree := r.open(t, 10*time.Second)
	if len(rep.acked) != n {
		t.Errorf("%d completes acknowledged, want %d", len(rep.acked), n)
	}
	evs, err := tree.Log(bg, fence.LogFilter{Heartbeats: true})
	if err != nil {
		t.Fatalf("Log: %v", err)
	}
	completes := map[string][]uint64{}
	for _, ev := range evs {
		if ev.Type == record.EvComplete {
			completes[ev.Task] = append(completes[ev.Task], ev.Token)
		}
	}
	for id, tok := range rep.acked {
		if got := completes[id]; len(got) != 1 || got[0] != tok {
			t.Errorf("task %s: complete events with tokens %v; acknowledged token %d", id, got, tok)
		}
	}
	for id, toks := range completes {
		if _, ok := rep.acked[id]; !ok {
			t.Errorf("task %s completed (tokens %v) but never acknowledged", id, toks)
		}
	}
	st, err := tree.Status(bg)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	if st.Counts[record.Done] != n {
		t.Errorf("status: %v, want all %d done", st.Counts, n)
	}
	checkInvariants(t, tree)
}

// waitLeader waits for the cluster to elect a leader other than not; nil
// (and the test failed) if none comes. Safe off the test's goroutine.
func waitLeader(t *testing.T, c *etcdtest.Cluster, not *etcdtest.Member) *etcdtest.Member {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if l := c.Leader(); l != nil && l != not {
			return l
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Error("no leader elected within 20s")
	return nil
}

// The leader of a 3-member cluster is killed mid-race: the agents go on
// through the other two members; every task is done exactly once.
func TestEtcdFaults_LeaderKilledMidRace(t *testing.T) {
	r := newEtcdRig(t, 3, testDefaults)
	const tasks, kills = 24, 2
	var recovered []time.Duration
	rep := r.race(t, 4, tasks, func(acks <-chan struct{}) {
		n := 0
		for k := range kills {
			for n < (k+1)*tasks/(kills+2) {
				if _, ok := <-acks; !ok {
					t.Errorf("race ended before kill %d", k+1)
					return
				}
				n++
			}
			l := waitLeader(t, r.c, nil)
			if l == nil {
				return
			}
			killed := time.Now()
			l.Stop()
			// Time until the next complete is acknowledged.
			if _, ok := <-acks; !ok {
				t.Errorf("no complete acknowledged after the leader %s was killed", l.Name)
				return
			}
			n++
			recovered = append(recovered, time.Since(killed))
			if err := l.Start(); err != nil {
				t.Errorf("restart %s: %v", l.Name, err)
			}
		}
		for range acks {
		}
	})
	t.Logf("%d tasks, 4 agents, %d leader kills; first complete after each kill %v; %d busy answers retried; %v in all", tasks, kills, recovered, rep.busy, rep.took)
}

// A member (not the leader) is stopped mid-race and started again from
// its data dir: agents go on, and the member catches up with the journal.
func TestEtcdFaults_MemberRestartedMidRace(t *testing.T) {
	r := newEtcdRig(t, 3, testDefaults)
	const tasks = 24
	var victim *etcdtest.Member
	rep := r.race(t, 4, tasks, func(acks <-chan struct{}) {
		for range tasks / 4 {
			<-acks
		}
		l := waitLeader(t, r.c, nil)
		if l == nil {
			return
		}
		for _, m := range r.c.Members() {
			if m != l {
				victim = m
				break
			}
		}
		victim.Stop()
		for range tasks / 4 {
			<-acks
		}
		if err := victim.Start(); err != nil {
			t.Errorf("restart %s: %v", victim.Name, err)
		}
		for range acks {
		}
	})
	// Read through the restarted member alone: it has caught up.
	only := r.open(t, 10*time.Second, victim.ClientURL)
	var st fence.Status
	err := untilOK(new(atomic.Int64), func() (err error) { st, err = only.Status(bg); return err })
	if err != nil {
		t.Fatalf("Status through %s: %v", victim.Name, err)
	}
	if st.Counts[record.Done] != tasks {
		t.Errorf("through the restarted member: %v, want %d done", st.Counts, tasks)
	}
	t.Logf("%d tasks, 4 agents, member %s stopped and restarted mid-race; %d busy answers retried; %v", tasks, victim.Name, rep.busy, rep.took)
}

// Every member of the cluster is stopped, then started again from its
// data dir: the journal is intact (same log, records, leases, files),
// the leases held across the restart still authorise their tokens, and
// the next claim's token is above every token issued before.
func TestEtcdFaults_ClusterRestartedFromDataDir(t *testing.T) {
	r := newEtcdRig(t, 3, testDefaults)
	tree := r.open(t, 10*time.Second)
	for i := range 6 {
		add(t, tree, fmt.Sprintf("t%d", i), 0)
	}
	var held []fence.ClaimResult
	for i := range 3 {
		c, err := tree.Claim(bg, fence.ClaimRequest{ID: fmt.Sprintf("t%d", i), Agent: "a", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	if _, err := tree.Complete(bg, fence.FencedRequest{ID: "t0", Token: held[0].Token, Agent: "a"}); err != nil {
		t.Fatal(err)
	}
	before := snap(t, tree)
	issued := before.status.LastToken

	quick := r.open(t, time.Second)
	for _, m := range r.c.Members() {
		m.Stop()
	}
	// A call while the whole cluster is down is refused as busy.
	if _, err := quick.Heartbeat(bg, fence.FencedRequest{ID: "t1", Token: held[1].Token, Agent: "a"}); !errors.Is(err, fence.ErrBusy) {
		t.Errorf("heartbeat with the cluster down: %v, want busy", err)
	}
	started := time.Now()
	errs := make(chan error, 3)
	for _, m := range r.c.Members() {
		go func() { errs <- m.Start() }()
	}
	for range r.c.Members() {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if waitLeader(t, r.c, nil) == nil {
		t.FailNow()
	}
	back := time.Since(started)

	// The Tree from before the restart (its client reconnects) and a new one.
	again := r.open(t, 10*time.Second)
	var busy atomic.Int64
	if err := untilOK(&busy, func() error { _, err := again.Status(bg); return err }); err != nil {
		t.Fatalf("Status after restart: %v", err)
	}
	unchanged(t, again, before, "the cluster restarted")
	if _, err := tree.Heartbeat(bg, fence.FencedRequest{ID: "t1", Token: held[1].Token, Agent: "a"}); err != nil {
		t.Errorf("heartbeat of a lease held across the restart: %v", err)
	}
	if _, err := again.Complete(bg, fence.FencedRequest{ID: "t2", Token: held[2].Token, Agent: "a"}); err != nil {
		t.Errorf("complete of a lease held across the restart: %v", err)
	}
	if _, err := again.Heartbeat(bg, fence.FencedRequest{ID: "t0", Token: held[0].Token, Agent: "a"}); err == nil {
		t.Errorf("heartbeat of t0, completed before the restart, accepted")
	} else {
		staleErr(t, err)
	}
	c, err := again.Claim(bg, fence.ClaimRequest{Agent: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Token <= issued {
		t.Errorf("claim after restart got token %d, not above %d issued before", c.Token, issued)
	}
	checkInvariants(t, again)
	t.Logf("3 members stopped and restarted: a leader %v after the start; %d busy answers; token %d after %d", back, busy.Load(), c.Token, issued)
}

// expireAndTake polls until taker claims id, which a lease that ran out
// on etcd's clock lets it do (the claim reaps it first). It returns how
// long that took.
func expireAndTake(t *testing.T, taker *fence.Tree, id string, token uint64) (fence.ClaimResult, time.Duration) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(30 * time.Second)
	for {
		c, err := taker.Claim(bg, fence.ClaimRequest{ID: id, Agent: "taker", TTL: time.Minute})
		if err == nil {
			reaped := false
			for _, r := range c.Reaped {
				reaped = reaped || r.Task == id && r.Token == token
			}
			if !reaped {
				t.Errorf("claim of %s after expiry reaped %+v, want token %d", id, c.Reaped, token)
			}
			return c, time.Since(start)
		}
		var na *fence.NotAvailableError
		if !errors.As(err, &na) && !errors.Is(err, fence.ErrBusy) {
			t.Fatalf("claim %s by another agent: %v", id, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lease of %s (token %d) never expired: %v", id, token, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// snapEtcd is snap without the lease deadlines: on etcd a live lease's
// deadline is judged when it is read (etcd's clock decides, the recorded
// one is the claimer's estimate), so two reads of an unchanged journal
// may show different ones.
func snapEtcd(t *testing.T, tree *fence.Tree) snapshot {
	t.Helper()
	s := snap(t, tree)
	for i := range s.status.Leases {
		s.status.Leases[i].Deadline = time.Time{}
	}
	for id, rec := range s.tasks {
		if rec.Lease != nil {
			l := *rec.Lease
			l.Deadline = time.Time{}
			rec.Lease = &l
			s.tasks[id] = rec
		}
	}
	return s
}

// unchangedEtcd is unchanged for snapEtcd.
func unchangedEtcd(t *testing.T, tree *fence.Tree, before snapshot, what string) {
	t.Helper()
	after := snapEtcd(t, tree)
	if !reflect.DeepEqual(after, before) {
		t.Errorf("%s changed the journal or the tree:\n  %+v\nwas\n  %+v", what, after, before)
	}
}

// refusedStale checks that every fenced call with an old token is
// refused as stale and changes nothing that observer sees.
func refusedStale(t *testing.T, holder, observer *fence.Tree, id string, token uint64) {
	t.Helper()
	before := snapEtcd(t, observer)
	for _, op := range fencedOps {
		err := op.call(holder, fence.FencedRequest{ID: id, Token: token, Agent: "holder"})
		if err == nil {
			t.Errorf("%s with the expired token %d accepted", op.name, token)
			continue
		}
		se := staleErr(t, err)
		if se.Yours != token || se.Holder != "taker" {
			t.Errorf("%s: %+v, want your token %d, holder taker", op.name, se, token)
		}
	}
	unchangedEtcd(t, observer, before, "calls with the expired token")
}

// A holder stops heartbeating: its lease (1 s) runs out on etcd's clock,
// another agent claims the task (reaping it), and the old holder's every
// fenced call is refused as stale and changes nothing.
func TestEtcdFaults_KeepalivesStop(t *testing.T) {
	r := newEtcdRig(t, 1, testDefaults)
	holder, taker := r.open(t, 5*time.Second), r.open(t, 5*time.Second)
	add(t, holder, "t0", 0)
	c, err := holder.Claim(bg, fence.ClaimRequest{ID: "t0", Agent: "holder", TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	took, expiredAfter := expireAndTake(t, taker, "t0", c.Token)
	if took.Token <= c.Token {
		t.Errorf("the new claim's token %d is not above the expired %d", took.Token, c.Token)
	}
	refusedStale(t, holder, taker, "t0", c.Token)
	if _, err := taker.Complete(bg, fence.FencedRequest{ID: "t0", Token: took.Token, Agent: "taker"}); err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, taker)
	t.Logf("a 1s lease without heartbeats was taken over %v after the claim returned", expiredAfter)
}

// An agent partitioned away from the cluster (its client knows one
// member, which stops) while it holds a lease: each of its calls fails as
// busy, naming the endpoint, within its timeout, and changes nothing; its
// lease runs out; once the member is back its old token is refused.
func TestEtcdFaults_ClientPartitioned(t *testing.T) {
	r := newEtcdRig(t, 3, testDefaults)
	l := waitLeader(t, r.c, nil)
	if l == nil {
		t.FailNow()
	}
	var cut *etcdtest.Member
	var rest []string
	for _, m := range r.c.Members() {
		if m != l && cut == nil {
			cut = m
		} else {
			rest = append(rest, m.ClientURL)
		}
	}
	const timeout = time.Second
	holder := r.open(t, timeout, cut.ClientURL)
	taker := r.open(t, 10*time.Second, rest...)
	add(t, taker, "t0", 0)
	add(t, taker, "t1", 0)
	c, err := holder.Claim(bg, fence.ClaimRequest{ID: "t0", Agent: "holder", TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cut.Stop()
	before := snapEtcd(t, taker)
	calls := append([]fencedOp{
		{"claim-next", func(tr *fence.Tree, _ fence.FencedRequest) error {
			_, err := tr.Claim(bg, fence.ClaimRequest{Agent: "holder"})
			return err
		}},
		{"add", func(tr *fence.Tree, _ fence.FencedRequest) error {
			_, err := tr.Add(bg, fence.AddRequest{ID: "t2"})
			return err
		}},
		{"status", func(tr *fence.Tree, _ fence.FencedRequest) error { _, err := tr.Status(bg); return err }},
	}, fencedOps...)
	// All at once, as an agent's heartbeat loop and its work would be.
	var slowest atomic.Int64
	var wg sync.WaitGroup
	for _, op := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			err := op.call(holder, fence.FencedRequest{ID: "t0", Token: c.Token, Agent: "holder"})
			took := int64(time.Since(start))
			for old := slowest.Load(); took > old && !slowest.CompareAndSwap(old, took); old = slowest.Load() {
			}
			var u *fence.UnreachableError
			switch {
			case !errors.Is(err, fence.ErrBusy):
				t.Errorf("%s while partitioned: %v, want busy", op.name, err)
			case !errors.As(err, &u):
				t.Errorf("%s while partitioned: %v (%T), want an *UnreachableError", op.name, err, err)
			case len(u.Endpoints) != 1 || u.Endpoints[0] != cut.ClientURL || !strings.Contains(err.Error(), cut.ClientURL):
				t.Errorf("%s while partitioned: %v, want the endpoint %s named", op.name, err, cut.ClientURL)
			}
		}()
	}
	within(t, "the partitioned agent's calls", wg.Wait)
	unchangedEtcd(t, taker, before, "the partitioned agent's calls")
	took, expiredAfter := expireAndTake(t, taker, "t0", c.Token)
	if err := cut.Start(); err != nil {
		t.Fatal(err)
	}
	// The holder's client reconnects: its old token is refused.
	var busy atomic.Int64
	err = untilOK(&busy, func() error {
		_, err := holder.Heartbeat(bg, fence.FencedRequest{ID: "t0", Token: c.Token, Agent: "holder"})
		return err
	})
	staleErr(t, err)
	refusedStale(t, holder, taker, "t0", c.Token)
	if _, err := taker.Complete(bg, fence.FencedRequest{ID: "t0", Token: took.Token, Agent: "taker"}); err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, taker)
	t.Logf("%d partitioned calls (timeout %v) failed busy within %v at most; the 1s lease was taken over %v after that; %d busy answers on reconnect", len(calls), timeout, time.Duration(slowest.Load()), expiredAfter, busy.Load())
}

// A client whose connection is closed under it while it holds a lease:
// its calls fail as busy at once and change nothing.
func TestEtcdFaults_ClientClosed(t *testing.T) {
	r := newEtcdRig(t, 1, testDefaults)
	b, err := etcdstore.New(r.cfg)
	if err != nil {
		t.Fatal(err)
	}
	holder, err := fence.Open(r.root, fence.Options{Backend: b, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	taker := r.open(t, 10*time.Second)
	add(t, taker, "t0", 0)
	c, err := holder.Claim(bg, fence.ClaimRequest{ID: "t0", Agent: "holder", TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	before := snapEtcd(t, taker)
	closed := time.Now()
	for _, op := range fencedOps {
		var err error
		within(t, op.name+" on a closed client", func() {
			err = op.call(holder, fence.FencedRequest{ID: "t0", Token: c.Token, Agent: "holder"})
		})
		if !errors.Is(err, fence.ErrBusy) {
			t.Errorf("%s on a closed client: %v (%T), want busy", op.name, err, err)
		}
	}
	unchangedEtcd(t, taker, before, "calls on a closed client")
	refused := time.Since(closed)
	took, expiredAfter := expireAndTake(t, taker, "t0", c.Token)
	t.Logf("%d calls on a closed client refused busy in %v in all; the 1s lease was taken over %v after that", len(fencedOps), refused, expiredAfter)
	// Back with a new connection, the old token is refused.
	again := r.open(t, 10*time.Second)
	refusedStale(t, again, taker, "t0", c.Token)
	if _, err := taker.Complete(bg, fence.FencedRequest{ID: "t0", Token: took.Token, Agent: "taker"}); err != nil {
		t.Fatal(err)
	}
}

// etcd compacts its history to the newest revision again and again while
// agents race and readers read: no operation fails for it (a snapshot
// read at a compacted revision runs again), every task is done once, and
// replay --check, show, log and status stay right.
func TestEtcdFaults_CompactionDuringRace(t *testing.T) {
	r := newEtcdRig(t, 1, testDefaults)
	cli := r.client(t)
	reader := r.open(t, 10*time.Second)
	var compactions, reads atomic.Int64
	rep := r.race(t, 4, 24, func(acks <-chan struct{}) {
		ctx, cancel := context.WithCancel(bg)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				resp, err := cli.Get(ctx, "compact")
				if err == nil {
					_, err = cli.Compact(ctx, resp.Header.Revision)
				}
				if err != nil && ctx.Err() == nil && !strings.Contains(err.Error(), "compacted") {
					t.Errorf("compact: %v", err)
				}
				compactions.Add(1)
				time.Sleep(2 * time.Millisecond)
			}
		}()
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				steps := []struct {
					name string
					fn   func() error
				}{
					{"status", func() error { _, err := reader.Status(bg); return err }},
					{"log", func() error { _, err := reader.Log(bg, fence.LogFilter{Heartbeats: true}); return err }},
					{"show", func() error { _, err := reader.Show(bg, "t00"); return err }},
					{"replay --check", func() error { _, err := reader.Replay(bg, true); return err }},
					{"reap --dry-run", func() error { _, err := reader.Reap(bg, true); return err }},
				}
				for _, s := range steps {
					if err := s.fn(); err != nil {
						t.Errorf("%s during compaction: %v", s.name, err)
					}
					reads.Add(1)
				}
			}
		}()
		for range acks {
		}
		cancel()
		wg.Wait()
	})
	t.Logf("24 tasks, 4 agents, %d compactions, %d reads beside them, %d write reruns in the process so far; %v", compactions.Load(), reads.Load(), etcdstore.Retries.Load(), rep.took)
}

// TestEtcdFaults_RecoverUnreachable: recover, which takes the tree lock on
// an etcd session, gives up within its timeout when etcd does not answer
// (here: nothing listens), as every other command does, and says it could
// not reach etcd; before, the session's lease was granted with no
// deadline and recover waited forever.
func TestEtcdFaults_RecoverUnreachable(t *testing.T) {
	r := newEtcdRig(t, 1, testDefaults)
	cfg := r.cfg
	cfg.Endpoints = []string{"127.0.0.1:1"}
	b, err := etcdstore.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	done := make(chan error, 1)
	go func() {
		_, err := fence.Recover(r.root, testDefaults, fence.Options{Backend: b, Timeout: time.Second})
		done <- err
	}()
	select {
	case err := <-done:
		var u *journal.UnreachableError
		if !errors.As(err, &u) {
			t.Fatalf("recover with etcd unreachable: %v, want an UnreachableError", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("recover with etcd unreachable and a 1s timeout still waits after a minute")
	}
}

// TestEtcdFaults_KeeperStopsWhileEtcdIsSilent: a lease keeper whose
// heartbeat hangs (its only etcd member is gone, and the tree's timeout is
// long) still gives the lease up as at risk at its stop point, not when
// the call returns: `fencectl run` must stop its command before the lease
// runs out, while another agent may take the task.
func TestEtcdFaults_KeeperStopsWhileEtcdIsSilent(t *testing.T) {
	r := newEtcdRig(t, 3, testDefaults)
	l := waitLeader(t, r.c, nil)
	if l == nil {
		t.FailNow()
	}
	var cut *etcdtest.Member
	for _, m := range r.c.Members() {
		if m != l {
			cut = m
			break
		}
	}
	const callTimeout = 40 * time.Second // far past the lease: only the stop point can end the wait
	holder := r.open(t, callTimeout, cut.ClientURL)
	add(t, holder, "t0", 0)
	c, err := holder.Claim(bg, fence.ClaimRequest{ID: "t0", Agent: "holder", TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	k, err := holder.NewKeeper(fence.KeeperConfig{Task: "t0", Token: c.Token, Agent: "holder", Deadline: c.Task.Lease.Deadline,
		TTL: 3 * time.Second, Interval: 100 * time.Millisecond, StopBefore: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Start(bg); err != nil {
		var w *fence.WatchError
		if !errors.As(err, &w) {
			t.Fatal(err)
		}
	}
	defer k.Stop()
	time.Sleep(300 * time.Millisecond) // a heartbeat or two get through
	cut.Stop()
	defer cut.Start()
	select {
	case <-k.Lost():
		var risk *fence.LeaseAtRiskError
		if err := k.Err(); !errors.As(err, &risk) {
			t.Fatalf("the keeper ended with %v, want a LeaseAtRiskError", err)
		}
	case <-time.After(callTimeout / 2):
		t.Fatalf("the keeper of a 3s lease still holds %v after its member stopped: it waits on the heartbeat", callTimeout/2)
	}
}

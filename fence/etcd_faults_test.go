package fence_test

import (
	"errors"
	"fmt"
	"path/filepath"
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

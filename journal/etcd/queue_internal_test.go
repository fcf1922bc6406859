package etcd

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// Turns come in the order writers joined, and the commit made with a
// turn gives it up: the next writer needs no write of the holder's.
func TestQueue_TurnsInOrderGivenUpByTheCommit(t *testing.T) {
	cfg, dir := newJournal(t)
	ctx := context.Background()
	backends := make([]*Backend, 3)
	for i := range backends {
		backends[i], _ = open(t, cfg, dir)
	}
	first, err := backends[0].joinQueue(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan int, 2)
	turns := make(chan *writerTurn, 2)
	for i := 1; i <= 2; i++ {
		go func() {
			w, err := backends[i].joinQueue(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			got <- i
			turns <- w
		}()
		time.Sleep(200 * time.Millisecond) // joined in this order
	}
	select {
	case i := <-got:
		t.Fatalf("writer %d got a turn while the first held it", i)
	case <-time.After(300 * time.Millisecond):
	}
	// The first's commit: it compares the turn and deletes its key.
	resp, err := backends[0].cli.Txn(ctx).If(first.holds()).Then(first.giveUp()).Commit()
	if err != nil || !resp.Succeeded {
		t.Fatalf("commit with the turn: %v, %v", resp, err)
	}
	select {
	case i := <-got:
		if i != 1 {
			t.Fatalf("writer %d got the turn before writer 1, who joined first", i)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the commit that gave the turn up let nobody in")
	}
	w := <-turns
	w.release()
	select {
	case i := <-got:
		if i != 2 {
			t.Fatalf("writer %d, want 2", i)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the second turn's release let nobody in")
	}
	(<-turns).release()
}

// A writer whose lease ran out loses its turn: its commit fails, says so,
// and the next writer is let in.
func TestQueue_LeaseRunOutLosesTheTurn(t *testing.T) {
	cfg, dir := newJournal(t)
	ctx := context.Background()
	b1, _ := open(t, cfg, dir)
	b2, _ := open(t, cfg, dir)
	w1, err := b1.joinQueue(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next := make(chan error, 1)
	go func() {
		w, err := b2.joinQueue(ctx)
		if err == nil {
			w.release()
		}
		next <- err
	}()
	if _, err := b1.cli.Revoke(ctx, w1.sess.Lease()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-next:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a turn whose lease was revoked still held the queue")
	}
	resp, err := b1.cli.Txn(ctx).If(w1.holds()).Then(w1.giveUp()).Else(w1.check()).Commit()
	if err != nil {
		t.Fatal(err)
	}
	if resp.Succeeded {
		t.Fatal("a commit with a lost turn went through")
	}
	// goneIn reads check's answer as the second of the Else.
	resp.Responses = append(resp.Responses[:0:0], resp.Responses[0], resp.Responses[0])
	if !w1.goneIn(resp) || !w1.lost() {
		t.Error("the failed commit did not tell that the turn is gone")
	}
}

// A writer that finds a queue of several joins it without sending a
// commit the queue would refuse; behind a lone writer it lets that turn
// pass and commits on its own, without joining.
func TestQueue_JoinBehindSeveralPassBehindOne(t *testing.T) {
	cfg, dir := newJournal(t)
	ctx := context.Background()
	b, s := open(t, cfg, dir)
	// Writers in the queue, as their keys (made before any turn of s).
	fake := func(name string) string {
		k := cfg.Prefix + keyWriters + "/" + name
		if _, err := b.cli.Put(ctx, k, ""); err != nil {
			t.Fatal(err)
		}
		return k
	}
	n := 0
	write := func() chan error {
		n++
		id := fmt.Sprintf("q%02d", n)
		c := make(chan error, 1)
		go func() {
			now := time.Now()
			c <- s.Update(func(tx journal.Tx) error {
				return tx.PutTask(nil, record.Task{ID: id, State: record.Available, MaxAttempts: 3, Seq: uint64(n), Created: now, Updated: now})
			})
		}()
		return c
	}
	a, c := fake("a"), fake("c")
	queued := Queued.Load()
	wrote := write()
	deadline := time.Now().Add(5 * time.Second)
	for Queued.Load() == queued && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if Queued.Load() == queued {
		t.Fatal("a writer that met a queue of two did not join it")
	}
	for _, k := range []string{a, c} {
		if _, err := b.cli.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	// Behind one writer: no join; the write goes through once it is gone.
	lone := fake("lone")
	queued = Queued.Load()
	wrote = write()
	time.Sleep(3 * time.Millisecond)
	if _, err := b.cli.Delete(ctx, lone); err != nil {
		t.Fatal(err)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if Queued.Load() != queued {
		t.Error("a writer behind a lone turn joined the queue")
	}
}

// A writer that joined the queue and then changed nothing (its function
// refused) gives its turn up: the queue is empty after it.
func TestQueue_RefusalGivesTheTurnUp(t *testing.T) {
	cfg, dir := newJournal(t)
	ctx := context.Background()
	b, s := open(t, cfg, dir)
	pfx := cfg.Prefix + keyWriters + "/"
	for _, name := range []string{"a", "c"} {
		if _, err := b.cli.Put(ctx, pfx+name, ""); err != nil {
			t.Fatal(err)
		}
	}
	refused := fmt.Errorf("refused")
	queued := Queued.Load()
	done := make(chan error, 1)
	go func() {
		done <- s.Update(func(journal.Tx) error { return refused })
	}()
	deadline := time.Now().Add(5 * time.Second)
	for Queued.Load() == queued && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	for _, name := range []string{"a", "c"} {
		if _, err := b.cli.Delete(ctx, pfx+name); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != refused {
		t.Fatalf("Update = %v, want the refusal", err)
	}
	resp, err := b.cli.Get(ctx, pfx, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 0 {
		t.Errorf("%d keys left in the queue after a refused write", resp.Count)
	}
}

package fence_test

import (
	"testing"
	"time"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal/record"
)

// TestTree_EventsAfter: the events above a sequence number, oldest
// first, a page at a time; heartbeats left out unless asked, but Last
// moves past them so the next page does not read them again.
func TestTree_EventsAfter(t *testing.T) {
	tree := newTree(t)
	add(t, tree, "a", 0)
	c := claim(t, tree, "a", "a1")
	if _, err := tree.Heartbeat(bg, fence.FencedRequest{ID: "a", Token: c.Token, Agent: "a1"}); err != nil {
		t.Fatal(err)
	}
	add(t, tree, "b", 0)

	all, err := tree.EventsAfter(bg, 0, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := types(all.Events); got != "add claim heartbeat add" || all.Last != 4 {
		t.Fatalf("all = %s, last %d; want add claim heartbeat add, last 4", got, all.Last)
	}
	p, err := tree.EventsAfter(bg, 1, 2, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := types(p.Events); got != "claim" || p.Last != 3 {
		t.Fatalf("after 1, limit 2, no heartbeats = %s, last %d; want claim, last 3", got, p.Last)
	}
	p, err = tree.EventsAfter(bg, p.Last, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := types(p.Events); got != "add" || p.Events[0].Task != "b" || p.Last != 4 {
		t.Fatalf("after 3 = %s, last %d; want add of b, last 4", got, p.Last)
	}
	p, err = tree.EventsAfter(bg, 4, 0, false)
	if err != nil || len(p.Events) != 0 || p.Last != 4 {
		t.Fatalf("after the head = %+v, %v; want nothing, last 4", p, err)
	}
	if _, err := tree.EventsAfter(bg, 0, -1, false); err == nil {
		t.Fatal("a negative limit was accepted")
	}
}

func types(evs []record.Event) string {
	s := ""
	for i, e := range evs {
		if i > 0 {
			s += " "
		}
		s += string(e.Type)
	}
	return s
}

// TestTree_Watch: a commit by another handle on the tree signals C.
func TestTree_Watch(t *testing.T) {
	tree := newTree(t)
	ch, err := tree.Watch()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	other, err := fence.Open(tree.Root(), fence.Options{Clock: testClock})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	add(t, other, "x", 0)
	select {
	case <-ch.C():
	case <-time.After(20 * time.Second):
		t.Fatal("no signal after a commit")
	}
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ch.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestTree_Gauges: counts, the leases' time left, the oldest available
// task (not the first to be claimed: priority goes first) and the head
// of the log, in one read.
func TestTree_Gauges(t *testing.T) {
	tree := newTree(t)
	g, err := tree.Gauges(bg)
	if err != nil {
		t.Fatal(err)
	}
	if !g.OldestAvailable.IsZero() || g.LastSeq != 0 || len(g.LeaseLeft) != 0 {
		t.Fatalf("empty tree: %+v", g)
	}
	add(t, tree, "old", 0)
	oldest := eventOf(t, tree, "old", record.EvAdd).Time
	add(t, tree, "urgent", 9)
	add(t, tree, "held", 0)
	c := claim(t, tree, "held", "a1")
	g, err = tree.Gauges(bg)
	if err != nil {
		t.Fatal(err)
	}
	if g.Counts[record.Available] != 2 || g.Counts[record.Claimed] != 1 {
		t.Errorf("counts = %v", g.Counts)
	}
	if !g.OldestAvailable.Equal(oldest) {
		t.Errorf("oldest available = %v, want %v (old's add)", g.OldestAvailable, oldest)
	}
	if want := c.Deadline.Sub(g.Now); len(g.LeaseLeft) != 1 || g.LeaseLeft[0] != want {
		t.Errorf("lease left = %v, want [%v]", g.LeaseLeft, want)
	}
	if g.LastSeq != 4 || g.LastToken != c.Token {
		t.Errorf("last seq %d, last token %d; want 4, %d", g.LastSeq, g.LastToken, c.Token)
	}
}

// HoldWrites keeps the Tree from starting a write until it is let go,
// while reads go on: run takes it before it stops itself on Ctrl-Z, so
// that it does not stop holding the tree's lock (found from outside:
// every other agent of the tree exited 5 until fg).
func TestTree_HoldWritesStartsNoWrite(t *testing.T) {
	tree := newTree(t)
	add(t, tree, "a", 0)
	release := tree.HoldWrites()
	done := make(chan error, 1)
	go func() {
		_, err := tree.Claim(bg, fence.ClaimRequest{Agent: "a1"})
		done <- err
	}()
	select {
	case err := <-done:
		release()
		t.Fatalf("a claim went through while writes were held: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := tree.Gauges(bg); err != nil {
		t.Fatalf("a read while writes were held: %v", err)
	}
	release()
	release() // twice is once
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the claim after the release: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the claim did not go through after the release")
	}
	add(t, tree, "b", 0) // and writes go on
}

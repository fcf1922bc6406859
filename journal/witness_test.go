package journal

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func ceilingDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), ".fence")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A store stands behind its witness when its revision or raft term is
// less: etcd restored from a snapshot. Another store's witness, or none,
// says nothing.
func TestWitness_Behind(t *testing.T) {
	w := Witness{Store: "etcd", Revision: 100, Term: 5}
	for _, tc := range []struct {
		now  Witness
		want bool
	}{
		{Witness{Store: "etcd", Revision: 100, Term: 5}, false},
		{Witness{Store: "etcd", Revision: 250, Term: 9}, false},
		{Witness{Store: "etcd", Revision: 99, Term: 5}, true},   // restored, revision back
		{Witness{Store: "etcd", Revision: 5000, Term: 2}, true}, // restored with a bumped revision
		{Witness{Store: "bbolt", Revision: 1, Term: 0}, false},
	} {
		if got := w.Behind(tc.now); got != tc.want {
			t.Errorf("%+v behind %+v = %v, want %v", tc.now, w, got, tc.want)
		}
	}
	if (Witness{}).Behind(Witness{Store: "etcd"}) {
		t.Error("no witness: nothing can stand behind it")
	}
}

func TestWitness_Stale(t *testing.T) {
	now := time.Now()
	if !(Witness{}).Stale(now) {
		t.Error("no witness is stale")
	}
	if (Witness{Store: "etcd", At: now.Add(-WitnessRefresh / 2)}).Stale(now) {
		t.Error("a witness half the refresh old is not stale")
	}
	if !(Witness{Store: "etcd", At: now.Add(-2 * WitnessRefresh)}).Stale(now) {
		t.Error("a witness twice the refresh old is stale")
	}
	if !(Witness{Store: "etcd", At: now.Add(time.Hour)}).Stale(now) {
		t.Error("a witness from a clock an hour ahead is stale (else it would never be refreshed)")
	}
}

// The ceiling's files keep the ceiling as their first number, so that a
// fencectl from before witnesses reads them as before; the witness line
// after it round-trips.
func TestCeilingWitness_RoundTripAndOldReaders(t *testing.T) {
	dir := ceilingDir(t)
	at := time.Unix(1_800_000_000, 0).UTC()
	w := Witness{Store: "etcd", Revision: 4242, Term: 7, At: at}
	if err := RaiseCeilingWitnessed(dir, 5000, w); err != nil {
		t.Fatal(err)
	}
	c, got, ok, err := ReadCeilingWitness(dir)
	if err != nil || !ok || c != 5000 || got != w {
		t.Fatalf("ReadCeilingWitness = %d, %+v, %v, %v; want 5000, %+v", c, got, ok, err, w)
	}
	for _, p := range CeilingPaths(dir) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		// How a reader before witnesses read the file: the first line
		// that is not a comment.
		var first string
		for _, line := range strings.Split(string(b), "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				first = line
				break
			}
		}
		if v, err := strconv.ParseUint(first, 10, 64); err != nil || v != 5000 {
			t.Fatalf("%s: an older reader finds %q first, want the ceiling 5000", p, first)
		}
	}
}

// RaiseCeiling (bbolt, replay) keeps the witness; a refresh only moves it
// on; a raise records its own witness even when it stands behind the old
// one: that is the raise of a store found restored, whose witness must
// replace the old one or every later claim would jump again.
func TestCeilingWitness_Updates(t *testing.T) {
	dir := ceilingDir(t)
	at := time.Unix(1_800_000_000, 0).UTC()
	old := Witness{Store: "etcd", Revision: 900, Term: 6, At: at}
	if err := RaiseCeilingWitnessed(dir, 1000, old); err != nil {
		t.Fatal(err)
	}
	read := func() (uint64, Witness) {
		t.Helper()
		c, w, ok, err := ReadCeilingWitness(dir)
		if err != nil || !ok {
			t.Fatalf("ReadCeilingWitness: %v, %v", ok, err)
		}
		return c, w
	}
	if err := RaiseCeiling(dir, 2000); err != nil {
		t.Fatal(err)
	}
	if c, w := read(); c != 2000 || w != old {
		t.Fatalf("after RaiseCeiling: %d, %+v; want 2000 and the witness kept", c, w)
	}
	behind := Witness{Store: "etcd", Revision: 10, Term: 2, At: at.Add(time.Minute)}
	if err := RaiseCeilingWitnessed(dir, 2000, behind); err != nil { // a refresh
		t.Fatal(err)
	}
	if c, w := read(); c != 2000 || w != old {
		t.Fatalf("a refresh with a witness behind: %d, %+v; want the old witness kept", c, w)
	}
	further := Witness{Store: "etcd", Revision: 950, Term: 6, At: at.Add(time.Minute)}
	if err := RaiseCeilingWitnessed(dir, 2000, further); err != nil {
		t.Fatal(err)
	}
	if c, w := read(); c != 2000 || w != further {
		t.Fatalf("a refresh further on: %d, %+v; want %+v", c, w, further)
	}
	if err := RaiseCeilingWitnessed(dir, 3000, behind); err != nil { // a raise
		t.Fatal(err)
	}
	if c, w := read(); c != 3000 || w != behind {
		t.Fatalf("a raise: %d, %+v; want 3000 and its own witness %+v", c, w, behind)
	}
}

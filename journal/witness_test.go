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

// A journal stands behind its witness when its token counter is below
// the witness's token: it has not issued a token that was issued.
func TestWitness_Behind(t *testing.T) {
	w := Witness{Token: 1000}
	for _, tc := range []struct {
		counter uint64
		want    bool
	}{{999, true}, {1000, false}, {5000, false}} {
		if got := w.Behind(tc.counter); got != tc.want {
			t.Errorf("counter %d behind %+v = %v, want %v", tc.counter, w, got, tc.want)
		}
	}
	if (Witness{}).Behind(0) {
		t.Error("no witness: nothing stands behind it")
	}
}

func TestWitness_Stale(t *testing.T) {
	now := time.Now()
	if !(Witness{}).Stale(now) {
		t.Error("no witness is stale")
	}
	if (Witness{Token: 1, At: now.Add(-WitnessRefresh / 2)}).Stale(now) {
		t.Error("a witness half the refresh old is not stale")
	}
	if !(Witness{Token: 1, At: now.Add(-2 * WitnessRefresh)}).Stale(now) {
		t.Error("a witness twice the refresh old is stale")
	}
	if !(Witness{Token: 1, At: now.Add(time.Hour)}).Stale(now) {
		t.Error("a witness from a clock an hour ahead is stale (else it would never be refreshed)")
	}
}

// The ceiling's files keep the ceiling as their first number, so that a
// fencectl from before witnesses reads them as before; the witness line
// after it round-trips.
func TestCeilingWitness_RoundTripAndOldReaders(t *testing.T) {
	dir := ceilingDir(t)
	at := time.Unix(1_800_000_000, 0).UTC()
	w := Witness{Token: 4242, At: at}
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

// RaiseCeiling (replay) keeps the witness; a witness only moves on to a
// higher token; a refresh (v 0) writes the witness beside the ceiling
// there, and writes nothing where there is no ceiling yet.
func TestCeilingWitness_Updates(t *testing.T) {
	dir := ceilingDir(t)
	at := time.Unix(1_800_000_000, 0).UTC()
	if err := RaiseCeilingWitnessed(dir, 0, Witness{Token: 5, At: at}); err != nil {
		t.Fatal(err)
	}
	if _, _, ok, _ := ReadCeilingWitness(dir); ok {
		t.Fatal("a refresh with no ceiling on file wrote a ceiling")
	}
	old := Witness{Token: 900, At: at}
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
	lower := Witness{Token: 10, At: at.Add(time.Minute)}
	if err := RaiseCeilingWitnessed(dir, 0, lower); err != nil {
		t.Fatal(err)
	}
	if c, w := read(); c != 2000 || w != old {
		t.Fatalf("a witness of a lower token: %d, %+v; want the old witness kept", c, w)
	}
	further := Witness{Token: 950, At: at.Add(time.Minute)}
	if err := RaiseCeilingWitnessed(dir, 0, further); err != nil {
		t.Fatal(err)
	}
	if c, w := read(); c != 2000 || w != further {
		t.Fatalf("a refresh further on: %d, %+v; want %+v", c, w, further)
	}
}

// A witness at or above its file's ceiling cannot be a token the journal
// issued (every token is below the ceiling): it is read as no witness, or
// a hand-edited or copied line would make every claim jump.
func TestCeilingWitness_AboveTheCeilingIsNone(t *testing.T) {
	dir := ceilingDir(t)
	at := time.Unix(1_800_000_000, 0).UTC()
	if err := RaiseCeilingWitnessed(dir, 1000, Witness{Token: 900, At: at}); err != nil {
		t.Fatal(err)
	}
	for _, p := range CeilingPaths(dir) {
		if err := os.WriteFile(p, []byte("1000\nwitness-token 5000 1800000000\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if c, w, ok, err := ReadCeilingWitness(dir); err != nil || !ok || c != 1000 || !w.IsZero() {
		t.Fatalf("ReadCeilingWitness = %d, %+v, %v, %v; want 1000 and no witness", c, w, ok, err)
	}
}

// A damaged witness line is taken for the highest token it could have
// named (just below the ceiling), so that a restored journal still starts
// above the ceiling: safety data that cannot be read is not ignored.
func TestCeilingWitness_DamagedLineIsTheHighest(t *testing.T) {
	dir := ceilingDir(t)
	for _, p := range CeilingPaths(dir) {
		if err := os.WriteFile(p, []byte("1000\nwitness-token 9x9 oops\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c, w, ok, err := ReadCeilingWitness(dir)
	if err != nil || !ok || c != 1000 || w.Token != 999 || !w.Behind(998) {
		t.Fatalf("ReadCeilingWitness = %d, %+v, %v, %v; want 1000 and a witness of 999", c, w, ok, err)
	}
	if !w.Stale(time.Now()) {
		t.Fatal("a damaged witness is stale: the next claim writes one in its place")
	}
	// A line of a later version's own is left alone.
	for _, p := range CeilingPaths(dir) {
		if err := os.WriteFile(p, []byte("1000\nwitness-v2 abc\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, w, _, _ := ReadCeilingWitness(dir); !w.IsZero() {
		t.Fatalf("another kind of line read as a witness: %+v", w)
	}
}

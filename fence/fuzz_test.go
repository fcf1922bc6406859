package fence_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal"
	boltstore "github.com/fencectl/fencectl/journal/bolt"
	"github.com/fencectl/fencectl/journal/record"
)

// FuzzApplyEvent (torture suite, part 4) stores arbitrary bytes as the
// newest event of a real tree's journal — and, when the mode byte says so,
// as the record of task t1 — written with bbolt directly, so nothing
// validates them on the way in. Then:
//
//   - the event is read back through journal.Tx (LastCommit) and, if it
//     decodes, folded with fence.Apply (from nothing, from the stored
//     record, from a claimed record) and fence.ApplyClaim: an error, never
//     a panic; a record Apply returns marshals back;
//   - the tree is used as every command would use it: a writer (Reap, which
//     first settles the last commit: the fuzzed event names the task, the
//     directories, the staged and output files to move), Replay --check,
//     Replay, Status, Log, Show and Claim. Each ends in a result or an
//     error, never a panic and never a *journal.CorruptError (the file is
//     sound, so that would be a panic the guard caught);
//   - nothing outside the tree is created, changed or removed, whatever
//     paths the event names ("../../x", "/abs", "..").
func FuzzApplyEvent(f *testing.F) {
	dl := time.Date(2030, 1, 1, 0, 10, 0, 0, time.UTC)
	ev := func(e record.Event) []byte { b, _ := json.Marshal(e); return b }
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	rec := func(r record.Task) []byte { b, _ := json.Marshal(r); return b }
	goodRec := rec(record.Task{ID: "t1", State: record.Available, MaxAttempts: 3, Seq: 1, Created: t0, Updated: t0})
	f.Add(byte(0), goodRec, ev(record.Event{Seq: 5, Time: t0, Type: record.EvClaim, Task: "t1", From: record.Available, To: record.Claimed, Agent: "x", Token: 1, Deadline: &dl}))
	f.Add(byte(0), goodRec, ev(record.Event{Seq: 5, Time: t0, Type: record.EvAdd, Task: "t9", To: record.Available, Staged: "../../../outside/secret.txt"}))
	f.Add(byte(0), goodRec, ev(record.Event{Seq: 5, Time: t0, Type: record.EvAdopt, Task: "t9", To: record.Done, Source: "../outside"}))
	f.Add(byte(0), goodRec, ev(record.Event{Seq: 5, Time: t0, Type: record.EvAdopt, Task: "../outside/secret.txt", To: record.Done, Source: "/"}))
	f.Add(byte(0), goodRec, ev(record.Event{Seq: 5, Time: t0, Type: record.EvPut, Task: "t2", To: record.Claimed, From: record.Claimed, Staged: "..", Output: "../../../outside/x"}))
	f.Add(byte(0), goodRec, ev(record.Event{Seq: 5, Time: t0, Type: record.EvComplete, Task: "t2", From: record.Claimed, To: "../../outside"}))
	f.Add(byte(0), goodRec, ev(record.Event{Seq: 5, Time: t0, Type: record.EvHeartbeat, Task: "t2", To: record.Claimed}))
	f.Add(byte(0), goodRec, ev(record.Event{Seq: 5, Type: "bogus", Task: "t2"}))
	f.Add(byte(1), []byte(`{"id":"t1","state":"claimed","lease":null}`), ev(record.Event{Seq: 5, Time: t0, Type: record.EvRelease, Task: "t1", From: record.Claimed, To: record.Available}))
	f.Add(byte(1), []byte(`{"id":"t1","state":"claimed","lease":{"token":18446744073709551615,"deadline":"0001-01-01T00:00:00Z"}}`), ev(record.Event{Seq: 5, Time: t0, Type: record.EvReap, Task: "t1", From: record.Claimed, To: record.Failed}))
	f.Add(byte(1), []byte(`{"id":"t1","state":"available","priority":-9223372036854775808,"seq":0}`), []byte(`{"seq":5,"type":"requeue","task":"t1","to":"available"}`))
	f.Add(byte(1), []byte("garbage"), []byte("garbage"))
	f.Add(byte(0), goodRec, []byte(`{"seq":5,"type":"claim","task":"t1","time":"0001-01-01T00:00:00Z","deadline":"9999-12-31T23:59:59.999999999Z","token":0}`))
	f.Add(byte(0), goodRec, []byte(`{"seq":5,"type":"claim","task":"t1","time":"9999-12-31T23:59:59Z","deadline":"0001-01-01T00:00:00Z","to":"claimed","from":"available"}`))
	f.Add(byte(0), goodRec, []byte(`{"seq":0,"type":"adopt","task":"","to":""}`))
	f.Add(byte(2), goodRec, []byte(`null`))
	f.Add(byte(2), goodRec, []byte(``))

	base := f.TempDir()
	pristine := filepath.Join(base, "pristine")
	buildPristine(f, pristine)
	outside := filepath.Join(base, "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		f.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("outside the tree\n"), 0o644); err != nil {
		f.Fatal(err)
	}
	work := filepath.Join(base, "tree")
	ctx := context.Background()

	f.Fuzz(func(t *testing.T, mode byte, raw, value []byte) {
		if err := os.RemoveAll(work); err != nil {
			t.Fatal(err)
		}
		copyTree(t, pristine, work)
		before := fzSnapshot(t, base, work)

		meta := filepath.Join(work, ".fence")
		b, err := bolt.Open(boltstore.Path(meta), 0o600, &bolt.Options{Timeout: time.Second, NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		err = b.Update(func(tx *bolt.Tx) error {
			evs := tx.Bucket([]byte("events"))
			seq, err := evs.NextSequence()
			if err != nil {
				return err
			}
			k := binary.BigEndian.AppendUint64(nil, seq)
			if err := evs.Put(k, value); err != nil {
				return err
			}
			if err := tx.Bucket([]byte("task_events")).Put(append([]byte("t1\x00"), k...), nil); err != nil {
				return err
			}
			if err := tx.Bucket([]byte("meta")).Put([]byte("last_commit"), append(k, k...)); err != nil {
				return err
			}
			if mode&1 != 0 {
				return tx.Bucket([]byte("tasks")).Put([]byte("t1"), raw)
			}
			return nil
		})
		if cerr := b.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}

		// The pure rules on the decoded event.
		db, err := boltstore.Open(meta, journal.OpenOptions{ReadOnly: true, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		err = db.View(func(tx journal.Tx) error {
			last, err := tx.LastCommit()
			if err != nil {
				return nil // undecodable: the error is the answer
			}
			stored, ok, rerr := tx.Task("t1")
			prevs := []*record.Task{nil, claimedRecord(t0, dl)}
			if ok && rerr == nil {
				prevs = append(prevs, &stored)
			}
			for _, e := range last {
				for _, p := range prevs {
					r, err := fence.Apply(p, e)
					if err == nil {
						if _, merr := json.Marshal(r); merr != nil {
							t.Errorf("Apply(%+v) result does not marshal: %v", e, merr)
						}
					}
				}
				_, _ = fence.ApplyClaim(nil, e)
				_, _ = fence.ApplyClaim(&record.Claim{Token: 7, Task: "t1", Agent: "a", At: t0}, e)
				if _, err := fence.DirOf(e.To); err == nil && !slices.Contains(record.States, e.To) {
					t.Errorf("DirOf(%q) has a directory, but %q is no state", e.To, e.To)
				}
			}
			return nil
		})
		db.Close()
		fzNotMasked(t, "View", err)

		// The tree as the commands use it.
		tree, err := fence.Open(work, fence.Options{Timeout: 5 * time.Second})
		if err != nil {
			t.Fatalf("fence.Open: %v", err)
		}
		defer tree.Close()
		_, err = tree.Reap(ctx, false)
		fzNotMasked(t, "Reap", err)
		_, err = tree.Replay(ctx, true)
		fzNotMasked(t, "Replay --check", err)
		_, err = tree.Replay(ctx, false)
		fzNotMasked(t, "Replay", err)
		_, err = tree.Status(ctx)
		fzNotMasked(t, "Status", err)
		_, err = tree.Log(ctx, fence.LogFilter{Heartbeats: true})
		fzNotMasked(t, "Log", err)
		_, err = tree.Log(ctx, fence.LogFilter{Task: "t1"})
		fzNotMasked(t, "Log --task", err)
		_, err = tree.Show(ctx, "t1")
		fzNotMasked(t, "Show", err)
		_, err = tree.Claim(ctx, fence.ClaimRequest{Agent: "fz", TTL: time.Minute})
		fzNotMasked(t, "Claim", err)

		after := fzSnapshot(t, base, work)
		if !bytes.Equal(before, after) {
			t.Errorf("something outside the tree changed:\nbefore:\n%s\nafter:\n%s", before, after)
		}
	})
}

func claimedRecord(t0, dl time.Time) *record.Task {
	return &record.Task{ID: "t1", State: record.Claimed, MaxAttempts: 3, Seq: 1, Created: t0, Updated: t0,
		Lease: &record.Lease{Token: 7, Agent: "a", ClaimedAt: t0, Deadline: dl, TTL: time.Minute}}
}

// buildPristine makes the tree every fuzz input starts from: t1 available
// (with content), t2 claimed, an output of t2 written.
func buildPristine(f *testing.F, root string) {
	if _, err := fence.Init(root, record.Defaults{TTL: time.Hour, MaxAttempts: 3}); err != nil {
		f.Fatal(err)
	}
	tree, err := fence.Open(root, fence.Options{Timeout: 5 * time.Second})
	if err != nil {
		f.Fatal(err)
	}
	defer tree.Close()
	ctx := context.Background()
	for _, id := range []string{"t2", "t1"} {
		if _, err := tree.Add(ctx, fence.AddRequest{ID: id, Content: strings.NewReader("task " + id)}); err != nil {
			f.Fatal(err)
		}
	}
	c, err := tree.Claim(ctx, fence.ClaimRequest{ID: "t2", Agent: "a", TTL: time.Hour})
	if err != nil {
		f.Fatal(err)
	}
	if _, err := tree.Put(ctx, fence.FencedRequest{ID: "t2", Token: c.Token, Agent: "a"}, "result", strings.NewReader("out")); err != nil {
		f.Fatal(err)
	}
}

// fzNotMasked fails on a *journal.CorruptError: the journal file is sound,
// so that can only be a panic that the journal's guard turned into an error.
func fzNotMasked(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Logf("%s: %v", what, err)
	}
	var ce *journal.CorruptError
	if errors.As(err, &ce) {
		t.Fatalf("%s: %v (a panic inside a transaction, caught by the guard)", what, err)
	}
	if err != nil && strings.Contains(err.Error(), "runtime error") {
		t.Fatalf("%s: %v", what, err)
	}
}

// copyTree copies the directory tree src to dst (regular files and
// directories only, as a fresh tree holds).
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(target, info.Mode().Perm())
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, info.Mode().Perm())
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// fzSnapshot lists everything below base except the tree itself: path,
// mode, size, mtime and content of each entry, without following symlinks.
func fzSnapshot(t *testing.T, base, skip string) []byte {
	t.Helper()
	var buf bytes.Buffer
	err := filepath.Walk(base, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if p == skip {
			return filepath.SkipDir
		}
		buf.WriteString(p + " " + fi.Mode().String())
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			buf.WriteString(" " + fi.ModTime().String() + " " + string(b))
		}
		buf.WriteByte('\n')
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

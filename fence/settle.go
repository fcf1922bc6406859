package fence

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/fencectl/fencectl/fsmirror"
	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// move is where one task's file goes after a commit.
type move struct {
	id     string
	from   fsmirror.Dir // where the file was before the commit
	staged string       // for add: the staging file name in .fence/tmp
	to     fsmirror.Dir
	err    error // a state with no directory (DirOf): nothing moves
	check  bool  // from == to: still make sure the file is there (see place)
}

// movesOf collapses a commit's events into one move per task, from where
// the file was before the first event to where the last event leaves it
// (a reap and a re-claim of the same task in one commit move nothing). A
// task settled as missing has no file to move; a task whose state has no
// directory (a damaged event) gets a move that carries the error.
func movesOf(evs []record.Event) []move {
	var out []move
	at := map[string]int{}
	missing := map[string]bool{}
	for _, ev := range evs {
		if ev.Type == record.EvMissing {
			missing[ev.Task] = true
		}
	}
	for _, ev := range evs {
		if missing[ev.Task] || ev.Task == "" || ev.Type == record.EvDefaults { // a tree's event (defaults, compacted): no task, no file
			continue
		}
		i, seen := at[ev.Task]
		if !seen {
			m := move{id: ev.Task}
			switch ev.Type {
			case record.EvAdd:
				m.from, m.staged = fsmirror.Staging, ev.Staged
			case record.EvAdopt:
				m.from = fsmirror.Dir(ev.Source)
				if ev.Staged != "" { // staged out of inbox/ before the commit
					m.from, m.staged = fsmirror.Staging, ev.Staged
				}
			default:
				m.from, m.err = DirOf(ev.From)
			}
			at[ev.Task] = len(out)
			out = append(out, m)
			i = len(out) - 1
		}
		to, err := DirOf(ev.To)
		if out[i].err == nil {
			out[i].to, out[i].err = to, err
		}
	}
	return out
}

// mirrorEvents moves the files of a commit that just succeeded and
// publishes its fenced outputs. A move or publish that fails for one
// task's file (EPERM, EXDEV, an occupied destination) is that task's
// failure, named in failed: the other tasks' moves go on. err is a
// failure of them all (a directory fsync).
//
// check asks that a task whose file does not move (heartbeat, renewal,
// put) have its file checked too: where writers do not take turns, a
// touch is when a move that a crash left undone is finished.
func (t *Tree) mirrorEvents(evs []record.Event, check bool) (failed map[string]error, err error) {
	fail := func(id string, err error) {
		if failed == nil {
			failed = map[string]error{}
		}
		failed[id] = err
	}
	b := t.mirror.NewBatch()
	for i, m := range movesOf(evs) {
		if i > 0 {
			crashAt("mirror:mid") // a commit of several moves, half moved
		}
		m.check = check
		if err := t.place(b, m); err != nil {
			fail(m.id, err)
		}
	}
	if err := b.Sync(); err != nil {
		return failed, err
	}
	for _, ev := range evs {
		if ev.Output != "" && failed[ev.Task] == nil {
			if err := t.mirror.Publish(ev.Staged, ev.Task, ev.Output); err != nil {
				_ = t.mirror.KeepUnpublished(ev.Staged) // replay publishes it
				fail(ev.Task, err)
			}
		}
	}
	return failed, nil
}

// publishPending publishes the outputs of the last commit that a crash
// left in staging. A staged file that is gone was published already.
func (t *Tree) publishPending(evs []record.Event) error {
	for _, ev := range evs {
		if ev.Output == "" {
			continue
		}
		if ok, err := t.mirror.StagedExists(ev.Staged); err != nil || !ok {
			continue
		}
		if err := t.mirror.Publish(ev.Staged, ev.Task, ev.Output); err != nil {
			// An odd entry in out/ must not wedge every writer: report it;
			// the staged content stays in .fence/tmp, for replay.
			_ = t.mirror.KeepUnpublished(ev.Staged)
			t.notify(NoticeNotPublished, ev.Task, err.Error()+"; kept in .fence/tmp: `fencectl replay` publishes it once the cause is fixed")
			continue
		}
		t.notify(NoticeSettled, ev.Task, "published out/"+ev.Task+"/"+ev.Output+" that an interrupted command left staged")
	}
	return nil
}

// place performs one move as part of batch b (whose Sync makes it
// durable). When the file is not where the journal last left it (moved by
// hand, or by a move that a crash cut short), it looks for it elsewhere; a
// file found nowhere is reported, not fatal: the journal is the truth and
// `replay` explains the loss.
func (t *Tree) place(b *fsmirror.Batch, m move) error {
	err := t.placeOnce(b, m)
	if !errors.Is(err, fs.ErrExist) {
		return err
	}
	// Another file holds the name the committed move goes to (a copy, a
	// restore by hand, a leftover): the journal says where the task's file
	// is, so that one is not the task's. Set it aside, as replay would,
	// and move the task's own file in: a claim that committed must not
	// fail after its commit, with a token nobody is given.
	q, qerr := t.mirror.Quarantine(m.to, m.id)
	if qerr != nil {
		return err
	}
	from := string(m.from)
	if m.staged != "" {
		from = "staging"
	}
	t.notify(NoticeQuarantined, m.id, fmt.Sprintf("%s/%s was another file than the task's (which the journal had in %s/): set aside as .fence/quarantine/%s", m.to, m.id, from, q))
	return t.placeOnce(b, m)
}

// placeOnce is place without the setting aside of an occupant.
func (t *Tree) placeOnce(b *fsmirror.Batch, m move) error {
	var err error
	switch {
	case m.err != nil:
		return m.err
	case m.staged != "":
		err = b.MoveFrom(fsmirror.Staging, m.staged, m.to, m.id)
		if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fs.ErrExist) {
			// A task's only content, committed: kept for the next
			// writer or replay, never swept as a dead writer's (found
			// from outside: swept, then the task failed as missing).
			_ = t.mirror.KeepUnpublished(m.staged)
		}
	case m.from == m.to:
		// Nothing moves (a heartbeat, a renewal, a put); where writers do
		// not take turns (etcd) this touch is also when a move a crash
		// left undone gets finished, so the file is checked (one stat).
		if !m.check {
			return nil
		}
		return t.ensure(m)
	case t.lazyMoves():
		err = b.MoveLazy(m.id, m.from, m.to) // redone after a reboot
	default:
		err = b.Move(m.id, m.from, m.to)
	}
	var odd *fsmirror.NotRegularError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &odd):
		// The journal has moved on; the odd entry stays for replay to report.
		t.notify(NoticeNotMoved, m.id, err.Error())
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	return t.ensure(m)
}

// ensure makes sure m.id's file is in m.to, finding it wherever it is.
func (t *Tree) ensure(m move) error {
	if m.err != nil {
		return m.err
	}
	if ok, err := t.mirror.Exists(m.to, m.id); err != nil || ok {
		return err
	}
	dir, _, err := t.mirror.Locate(m.id)
	switch {
	case err == nil:
		return t.mirror.Move(m.id, dir, m.to)
	case !errors.Is(err, fs.ErrNotExist):
		return err
	case m.staged != "":
		err = t.mirror.MoveFrom(fsmirror.Staging, m.staged, m.to, m.id)
		if err == nil || !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	t.notify(NoticeMissingFile, m.id, "the journal has this task in "+string(m.to)+"/ but its file is in no directory")
	return nil
}

// dropOldName removes the old name of m's file if a move by link left it
// (a crash between link and unlink: one file, two names). Cheap: one
// lstat when there is none.
func (t *Tree) dropOldName(m move) {
	from, name := m.from, m.id
	if m.staged != "" {
		from, name = fsmirror.Staging, m.staged
	}
	if m.err != nil || from == "" || (from == m.to && name == m.id) {
		return
	}
	dropped, err := t.mirror.DropLink(from, name, m.to, m.id)
	switch {
	case err != nil:
		t.notify(NoticeNotSettled, m.id, err.Error()+"; left for replay")
	case dropped:
		t.notify(NoticeSettled, m.id, "removed the old name "+string(from)+"/"+name+" that an interrupted move left (the same file as "+string(m.to)+"/"+m.id+")")
	}
}

// settle finishes the moves of the last commit if a crash cut them short.
// Writers are serialised by the lock, so only the last commit can be
// behind; this costs one read and a stat per task it touched, or nothing
// when the writer of that commit marked its moves done.
func (t *Tree) settle(db journal.Store) error {
	head, err := db.Head()
	if err != nil {
		return err
	}
	if t.isMirrored(head) {
		return nil
	}
	var todo, done []move
	var last []record.Event
	err = db.View(func(tx journal.Tx) error {
		todo, done = nil, nil // a store may run this more than once
		evs, err := tx.LastCommit()
		if err != nil {
			return err
		}
		last = evs
		for _, m := range movesOf(evs) {
			rec, ok, err := tx.Task(m.id)
			if err != nil || !ok {
				return err
			}
			if m.to, m.err = DirOf(rec.State); m.err != nil {
				todo = append(todo, m) // ensure reports it
				continue
			}
			if ok, err := t.mirror.Exists(m.to, m.id); err != nil {
				// A symlink or other odd file in its place: leave it for
				// replay to report rather than block every writer.
				t.notify(NoticeSettled, m.id, err.Error())
			} else if !ok {
				todo = append(todo, m)
			} else {
				done = append(done, m)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, m := range done {
		t.dropOldName(m)
	}
	for _, m := range todo {
		if err := t.ensure(m); err != nil {
			// One task's file (EPERM, EXDEV, an occupied destination) must
			// not stop every writer: report it and leave it for replay.
			t.notify(NoticeNotSettled, m.id, err.Error()+"; left for replay")
			continue
		}
		if ok, _ := t.mirror.Exists(m.to, m.id); !ok {
			continue // in no directory: ensure said so (no "moved" to tell)
		}
		t.notify(NoticeSettled, m.id, settledDetail(m.from, m.to))
	}
	if err := t.publishPending(last); err != nil {
		return err
	}
	// Settled as far as it can be: the next writer need not try again.
	t.mirrored(head)
	return nil
}

// reconcile puts the files of the tasks a commit touched where the journal
// says they are now. On a store whose writers do not take turns (etcd, on
// several hosts), another host may have committed a later change to one
// of them and moved its file before this writer's move landed; reading
// the journal again after moving, and moving once more if it differs,
// lets the last writer to touch a task leave its file in the right place.
func (t *Tree) reconcile(db journal.Store, evs []record.Event) {
	// A store that knows its own last commit spares the reads when nobody
	// committed since (one round trip instead of one per task).
	if c, ok := db.(interface{ CommitHead() string }); ok {
		if head, err := db.Head(); err == nil && head != "" && head == c.CommitHead() {
			return
		}
	}
	t.reconcileTasks(db, evs)
}

// reconcileTasks is reconcile without its shortcut: it reads the journal
// for the tasks of evs and moves each file that is not where it says,
// then reads again for the files it moved, until a read finds them in
// place. A move made on a read that another host's commit has since
// overtaken would otherwise stand: whoever moves a file last must be the
// one who checks it last. Two reconcilers of one task converge, since
// every read after the last commit names the same directory.
func (t *Tree) reconcileTasks(db journal.Store, evs []record.Event) {
	ids := make([]string, 0, len(evs))
	seen := map[string]bool{}
	for _, ev := range evs {
		if !seen[ev.Task] {
			seen[ev.Task] = true
			ids = append(ids, ev.Task)
		}
	}
	var failed map[string]error
	for round := 0; len(ids) > 0; round++ {
		var todo []move
		err := db.View(func(tx journal.Tx) error {
			todo = todo[:0]
			for _, id := range ids {
				rec, ok, err := tx.Task(id)
				if err != nil || !ok {
					continue
				}
				m := move{id: id}
				if m.to, m.err = DirOf(rec.State); m.err != nil {
					continue
				}
				if ok, err := t.mirror.Exists(m.to, m.id); err == nil && !ok {
					todo = append(todo, m)
				}
			}
			return nil
		})
		if err != nil || len(todo) == 0 {
			return // in place, or the next writer to touch them reconciles them
		}
		if round == maxReconcileRounds {
			for _, m := range todo {
				detail := "its file keeps moving away from where the journal says"
				if err := failed[m.id]; err != nil {
					detail = err.Error()
				}
				t.notify(NoticeNotSettled, m.id, detail+"; left for replay")
			}
			return
		}
		ids, failed = ids[:0], map[string]error{}
		for _, m := range todo {
			if err := t.ensure(m); err != nil {
				failed[m.id] = err // perhaps moved meanwhile: look again
			} else if ok, _ := t.mirror.Exists(m.to, m.id); !ok {
				continue // in no directory: ensure said so
			}
			ids = append(ids, m.id)
		}
	}
}

// maxReconcileRounds bounds reconcileTasks' move-and-check rounds: more
// than a few means hosts keep committing changes to the task faster than
// its file can follow, and the last of them settles it.
const maxReconcileRounds = 4

// settledDetail says why a task's file moved from one directory to
// another with no command of the caller's asking: the journal, the truth,
// has the task there. Either a command was interrupted between its commit
// and its move, or the journal was put back from a backup and knows
// nothing of the moves made since.
func settledDetail(from, to fsmirror.Dir) string {
	return "moved from " + string(from) + "/ to " + string(to) + "/, where the journal has it (a command interrupted before its move, or a journal restored from a backup)"
}

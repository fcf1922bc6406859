package fence

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/fencectl/fencectl/fsmirror"
	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// Finding is one disagreement between the event log, the stored records
// and the tree; its Kind says which (and whether replay can fix it).
type Finding struct {
	Kind   FindingKind `json:"kind"`
	Task   string      `json:"task,omitempty"`
	Dir    string      `json:"dir,omitempty"`
	Detail string      `json:"detail"`
	Fixed  bool        `json:"fixed"`
}

// ReplayReport is what replay found and did.
type ReplayReport struct {
	Events   int       `json:"events"`
	Tasks    int       `json:"tasks"`
	Findings []Finding `json:"findings"`
}

// Unfixed counts findings that are still true.
func (r ReplayReport) Unfixed() int {
	n := 0
	for _, f := range r.Findings {
		if !f.Fixed {
			n++
		}
	}
	return n
}

// replayState is the log folded into records, plus what the tree holds.
type replayState struct {
	tasks   map[string]record.Task
	claims  map[uint64]record.Claim
	staged  map[string]string // task → staging name of its add event
	publish []pendingOutput   // outputs still staged, for the repair to publish
	settles map[string]bool   // staged names of the last commit: settle's to place
	// superseded are kept outputs a later put of the same name replaced.
	superseded []pendingOutput
	outputs    []pendingOutput // fenced outputs (put, complete --result), by their staging names
	rebuild    bool            // stored records, claims or indexes differ from the log
	// ownClock: the store judges expiry by its own clock (etcd, the one
	// store that holds no writer off: WritersHeld) and hands out records
	// whose lease deadline says what that clock says, not what the
	// claiming host wrote: the deadline is not compared. On bbolt it is,
	// by replay --check as by replay.
	ownClock bool
	moves    []move            // misplaced files to put back
	extra    []extraCopy       // second copies to quarantine, second names to remove
	adopt    []adoption        // unknown files to adopt
	missing  []string          // tasks whose file is in no directory, to settle
	counter  uint64            // raise the token counter to this (0: it is fine)
	ceiling  uint64            // raise the ceiling files to this (0: they are fine)
	lastSeq  uint64            // the log's last event when it was read
	own      map[string]uint64 // the tasks replay itself committed events for since: the last one's seq
}

// foldMark is what replay keeps of a task compact folded, while it reads
// the journal: the folded record (not decoded: see journal.FoldedRecord),
// whose events up to seq upTo replay skips if they are still there, and
// whether a later event changed the task. If none did, the stored record
// must be the folded one, compared byte for byte, and the task is not
// decoded twice: its record, read once, is checked against the folded
// encoding. A touched task starts from the folded record, decoded.
type foldMark struct {
	rec     journal.FoldedRecord
	touched bool
}

// extraCopy is a task file in a directory besides the one that keeps the
// task: a second copy, quarantined, or a second name of the same file (a
// move by link cut short, see fsmirror.DropLink), removed.
type extraCopy struct {
	id   string
	dir  fsmirror.Dir
	keep fsmirror.Dir // where the file that stays is once the moves are done
}

type adoption struct {
	id   string
	seq  uint64 // the event of replay's own that adopted it
	from fsmirror.Dir
	to   record.State
}

// Replay rebuilds the derived state from the event log, compares it with
// the stored records and indexes, and compares the tree with it. With check
// it only reports (under the shared lock, so no writer moves files while it
// looks). Otherwise it rewrites records that differ from the log, adopts
// valid unknown files in the state of their directory (claimed/ ones as
// available: no lease exists for them), moves misplaced files,
// quarantines second copies, and fails tasks whose file is in no directory
// (missingEvent: done ones stay done), so that the tree and the journal
// agree again. A second run finds nothing to do.
func (t *Tree) Replay(ctx context.Context, check bool) (ReplayReport, error) {
	if err := ctx.Err(); err != nil {
		return ReplayReport{}, err
	}
	db, err := t.open(check)
	if err != nil {
		return ReplayReport{}, err
	}
	defer db.Close()
	var dead []string // staged files whose writer was gone before the log was read
	if !check {
		// Replay is a writer: like every writer it first finishes the last
		// commit and adopts the inbox.
		if err := t.beginWrite(db, true); err != nil {
			return ReplayReport{}, err
		}
		if !db.Exclusive() {
			// Writers on several hosts do not sweep the staging directory
			// (a live writer's staged file looks like an orphan there):
			// replay, the full repair, does, so that what a dead adopter
			// staged goes back to inbox/ (or on to its task's directory)
			// and a dead writer's content to .fence/quarantine; then it
			// adopts what went back. Which dead files are content of no
			// commit can only be told after the log is read (see
			// quarantineDead).
			dead = t.deadStaged(db)
			t.adoptInbox(db)
		}
	}
	// Under this host's lock (bbolt; shared for --check) no writer moves a
	// file until replay is done, so the directories are listed while the
	// log is read. On etcd writers on other hosts go on, and compareTree
	// lists the staging directory before the state directories (see
	// there): the listing waits for the log.
	scan := func() (dirScan, error) { return scanStateDirs(t.mirror, replayLeaves) }
	if db.WritersHeld() {
		scan = scanInBackground(t.mirror, replayLeaves)
	}
	var rep ReplayReport
	var st *replayState
	err = db.View(func(tx journal.Tx) error {
		// A store may run this more than once: each run starts afresh.
		rep = ReplayReport{}
		n := 0
		for _, c := range tx.Counts() {
			n += c // the records' count: the log's tasks are about as many
		}
		st = &replayState{tasks: make(map[string]record.Task, n), claims: map[uint64]record.Claim{}, staged: map[string]string{}, ownClock: !db.WritersHeld()}
		if err := st.compareJournal(tx, &rep); err != nil {
			return err
		}
		t.compareTokens(tx, st, &rep)
		if db.Exclusive() || db.WritersHeld() {
			// The last commit's outputs are the next writer's to publish
			// (settle), as its moves are: no drift.
			last, err := tx.LastCommit()
			if err != nil {
				return err
			}
			st.settles = map[string]bool{}
			for _, ev := range last {
				if ev.Staged != "" {
					st.settles[ev.Staged] = true
				}
			}
		}
		st.lastSeq, err = lastSeq(tx)
		return err
	})
	if err != nil {
		if db.WritersHeld() {
			scan() // the listing is this call's: not left running after it
		}
		return rep, err
	}
	t.quarantineDead(st, dead)
	if err := t.compareTree(st, &rep, scan); err != nil {
		return rep, err
	}
	rep.Tasks = len(st.tasks)
	sort.SliceStable(rep.Findings, func(i, j int) bool { return rep.Findings[i].Task < rep.Findings[j].Task })
	if check {
		return rep, nil
	}
	if err := t.repair(db, st); err != nil {
		return rep, err
	}
	for i := range rep.Findings {
		rep.Findings[i].Fixed = rep.Findings[i].Kind.Fixable()
	}
	return rep, nil
}

// deadStaged returns the staged files no live writer holds, and puts back
// what dead adopters staged (the journal says whether their adoption
// committed).
func (t *Tree) deadStaged(db journal.Store) []string {
	dead, adopting, err := t.mirror.Sweep(true)
	if err != nil {
		t.notify(NoticeWarning, string(fsmirror.Staging), err.Error())
	}
	t.restoreAdoptions(db, adopting)
	return dead
}

// quarantineDead moves to .fence/quarantine the dead staged files that no
// committed event names. A writer that died after its commit but before
// publishing leaves its content staged and unlocked: that content is the
// task's (or output's) only copy, and compareTree publishes it. Every
// name in dead was dead before the log was read, so a commit naming it,
// which came before its writer died, is in st.
func (t *Tree) quarantineDead(st *replayState, dead []string) {
	needed := st.neededStaged()
	for _, name := range dead {
		if needed[name] {
			continue
		}
		if _, err := t.mirror.Quarantine(fsmirror.Staging, name); err == nil {
			t.notify(NoticeQuarantined, name, "staged by a process that died before its commit; moved to .fence/quarantine")
		}
	}
}

// pendingOutput is a fenced output a committed event names: its staging
// name, and where it is published (out/task/name).
type pendingOutput struct{ staged, task, name string }

// neededStaged is the set of staged names that committed events name.
func (st *replayState) neededStaged() map[string]bool {
	needed := map[string]bool{}
	for _, s := range st.staged {
		needed[s] = true
	}
	for _, o := range st.outputs {
		needed[o.staged] = true // an output the next writer publishes (settle)
	}
	return needed
}

// unjudged is rec with want's lease deadline when the store judged rec's
// by its own clock (ownClock) and the lease is the same claim's.
func (st *replayState) unjudged(rec, want record.Task) record.Task {
	if !st.ownClock || rec.Lease == nil || want.Lease == nil || rec.Lease.Token != want.Lease.Token {
		return rec
	}
	l := *rec.Lease
	l.Deadline = want.Lease.Deadline
	rec.Lease = &l
	return rec
}

// compareJournal folds the log and compares the result with what is
// stored.
func (st *replayState) compareJournal(tx journal.Tx, rep *ReplayReport) error {
	add := func(f Finding) { rep.Findings = append(rep.Findings, f) }
	folded, err := foldedMarks(tx)
	if err != nil {
		return err
	}
	untouched := len(folded)
	err = tx.Events(1, func(ev record.Event) (bool, error) {
		rep.Events++
		if ev.Task == "" || ev.Type == record.EvDefaults {
			return true, nil // the tree's settings, a compaction: no task to fold it into
		}
		var prev *record.Task
		if p, ok := st.tasks[ev.Task]; ok {
			prev = &p
		} else if mark := folded.find(ev.Task); mark != nil {
			// The task's first event since its fold, or one of the
			// folded ones, not dropped yet (on etcd compact drops a few
			// at a time, each bunch with the claims its tokens name,
			// oldest first): its claim record is still there while its
			// claim event is.
			if ev.Seq <= mark.rec.UpTo {
				st.foldClaim(ev)
				return true, nil
			}
			base, err := mark.rec.Task()
			if err != nil {
				return false, err
			}
			mark.touched = true
			untouched--
			prev = &base
		}
		rec, err := Apply(prev, ev)
		if err != nil {
			add(Finding{Kind: FindingLogError, Task: ev.Task, Detail: err.Error()})
			if prev != nil {
				st.tasks[ev.Task] = *prev
			}
			return true, nil
		}
		st.tasks[ev.Task] = rec
		switch {
		case ev.Type == record.EvAdd || ev.Type == record.EvAdopt && ev.Staged != "":
			st.staged[ev.Task] = ev.Staged
		case ev.Staged != "":
			st.outputs = append(st.outputs, pendingOutput{staged: ev.Staged, task: ev.Task, name: ev.Output})
		}
		st.foldClaim(ev)
		return true, nil
	})
	if err != nil {
		return err
	}
	// Records are counted, not remembered: a million ids in a map cost
	// more than the compare itself. Only when some of the log's tasks have
	// no record does a second pass find which. The folded records come in
	// id order, as the stored ones do: they are walked side by side.
	known, foldedSeen, next := 0, 0, 0
	err = tx.ForEachTask(func(rec record.Task) error {
		for next < len(folded) && folded[next].rec.ID < rec.ID {
			next++
		}
		var want record.Task
		ok := false
		if next < len(folded) && folded[next].rec.ID == rec.ID && !folded[next].touched {
			// The log's record is the folded one, as compact left it.
			mark := folded[next]
			foldedSeen++
			enc := journal.EncodeTask(rec)
			if bytes.Equal(enc, mark.rec.Enc) {
				st.tasks[rec.ID] = rec
				known++
				return nil
			}
			var err error
			if want, err = mark.rec.Task(); err != nil {
				return err
			}
			st.tasks[rec.ID] = want
			if bytes.Equal(enc, journal.EncodeTask(want)) {
				known++
				return nil // the same record, encoded by another codec version
			}
			ok = true
		} else {
			want, ok = st.tasks[rec.ID]
		}
		if ok {
			known++
		}
		switch {
		case !ok:
			add(Finding{Kind: FindingRecordExtra, Task: rec.ID, Detail: "the journal has a record the event log never created; replay removes it"})
		case !sameJSON(st.unjudged(rec, want), want):
			add(Finding{Kind: FindingRecordMismatch, Task: rec.ID, Detail: fmt.Sprintf("stored record (%s, %d attempts) differs from the event log (%s, %d attempts); replay rewrites it", rec.State, rec.Attempts, want.State, want.Attempts)})
		}
		return nil
	})
	if err != nil {
		return err
	}
	if foldedSeen < untouched {
		// Folded tasks without a stored record: the log has them as
		// folded, and the pass below reports them missing.
		for _, mark := range folded {
			if _, ok := st.tasks[mark.rec.ID]; ok || mark.touched {
				continue
			}
			want, err := mark.rec.Task()
			if err != nil {
				return err
			}
			st.tasks[mark.rec.ID] = want
		}
	}
	if known < len(st.tasks) {
		seen := make(map[string]bool, known)
		err := tx.ForEachTask(func(rec record.Task) error { seen[rec.ID] = true; return nil })
		if err != nil {
			return err
		}
		for id, rec := range st.tasks {
			if !seen[id] {
				add(Finding{Kind: FindingRecordMissing, Task: id, Detail: fmt.Sprintf("the event log has this task (%s) but no record; replay restores it", rec.State)})
			}
		}
	}
	nclaims := 0
	err = tx.ForEachClaim(func(c record.Claim) error {
		nclaims++
		if want, ok := st.claims[c.Token]; !ok || !sameJSON(c, want) {
			add(Finding{Kind: FindingClaimMismatch, Task: c.Task, Detail: fmt.Sprintf("stored record of token %d differs from the event log", c.Token)})
		}
		return nil
	})
	if err != nil {
		return err
	}
	if nclaims != len(st.claims) {
		add(Finding{Kind: FindingClaimMismatch, Detail: fmt.Sprintf("%d token records stored, the event log has %d", nclaims, len(st.claims))})
	}
	// Counted by state index, not in a map: a million string-keyed
	// increments showed in the profile.
	byState := make([]int, len(record.States))
	ready, blocked := 0, 0
	due := map[string]time.Time{} // the tasks that wait for a time only, as the log has them
	deps := map[[2]string]bool{}  // (dependency, dependent) as the log has them
	labels := map[string]int{}    // ready tasks per label
	for _, rec := range st.tasks {
		for i, s := range record.States {
			if rec.State == s {
				byState[i]++
				break
			}
		}
		switch {
		case rec.Ready():
			ready++
		case rec.Blocked():
			blocked++
		}
		for _, dep := range rec.After {
			deps[[2]string{dep, rec.ID}] = true
		}
		if rec.Scheduled() {
			due[rec.ID] = rec.NotBefore
		}
		if rec.Ready() {
			for _, l := range rec.Labels {
				labels[l]++
			}
		}
	}
	counts := make(map[record.State]int, len(record.States))
	for i, s := range record.States {
		counts[s] = byState[i]
	}
	stored := tx.Counts()
	for _, s := range record.States {
		if stored[s] != counts[s] {
			add(Finding{Kind: FindingIndexMismatch, Detail: fmt.Sprintf("count of %s is %d, the event log has %d", s, stored[s], counts[s])})
		}
	}
	inReady, expiry := tx.IndexSizes()
	if inReady != ready || expiry != counts[record.Claimed] {
		add(Finding{Kind: FindingIndexMismatch, Detail: fmt.Sprintf("ready index has %d entries, expiry index %d; the event log has %d ready and %d claimed", inReady, expiry, ready, counts[record.Claimed])})
	}
	if n := tx.Blocked(); n != blocked {
		add(Finding{Kind: FindingIndexMismatch, Detail: fmt.Sprintf("blocked count is %d, the event log has %d blocked tasks", n, blocked)})
	}
	strayDue, wrongDue := 0, 0
	err = tx.Scheduled(func(id string, at time.Time) bool {
		want, ok := due[id]
		switch {
		case !ok:
			strayDue++
		case !want.Equal(at):
			wrongDue++
		}
		delete(due, id)
		return true
	})
	if err != nil {
		return err
	}
	if strayDue > 0 || wrongDue > 0 || len(due) > 0 {
		add(Finding{Kind: FindingIndexMismatch, Detail: fmt.Sprintf("due index: %d entries the event log does not have, %d at another time, %d missing", strayDue, wrongDue, len(due))})
	}
	stray := 0
	err = tx.Dependencies(func(dep, id string) bool {
		if !deps[[2]string{dep, id}] {
			stray++
		}
		delete(deps, [2]string{dep, id})
		return true
	})
	if err != nil {
		return err
	}
	if stray > 0 || len(deps) > 0 {
		add(Finding{Kind: FindingIndexMismatch, Detail: fmt.Sprintf("dependents index: %d entries the event log does not have, %d missing", stray, len(deps))})
	}
	for l, want := range labels {
		n := 0
		tx.ReadyLabel(l, func(string) bool { n++; return true })
		if n != want {
			add(Finding{Kind: FindingIndexMismatch, Detail: fmt.Sprintf("ready index of label %s has %d entries, the event log has %d ready tasks with it", l, n, want)})
		}
	}
	for _, f := range rep.Findings {
		if f.Kind != "log_error" {
			st.rebuild = true
		}
	}
	for _, err := range tx.Check() {
		add(Finding{Kind: FindingBboltCheck, Detail: err.Error()})
	}
	return nil
}

// foldClaim folds ev into the claim record of its token, if it has one.
func (st *replayState) foldClaim(ev record.Event) {
	if ev.Token == 0 {
		return
	}
	var pc *record.Claim
	if c, ok := st.claims[ev.Token]; ok {
		pc = &c
	}
	if c, ok := ApplyClaim(pc, ev); ok {
		st.claims[ev.Token] = c
	}
}

// foldedMarks reads the folded records, not decoded (see foldMark), in
// id order: a list, not a map, as a million map entries cost more than
// the compare. The marks hold the store's memory: they are used inside the
// transaction only.
func foldedMarks(tx journal.Tx) (foldMarks, error) {
	var folded foldMarks
	err := tx.Folded(func(f journal.FoldedRecord) (bool, error) {
		folded = append(folded, foldMark{rec: f})
		return true, nil
	})
	// Sorted already (the port hands them out in id order): a store that
	// did not would make find miss, so it is checked, not assumed.
	if !slices.IsSortedFunc(folded, compareMarks) {
		slices.SortFunc(folded, compareMarks)
	}
	return folded, err
}

// foldMarks are the folded tasks in id order.
type foldMarks []foldMark

func compareMarks(a, b foldMark) int { return strings.Compare(a.rec.ID, b.rec.ID) }

// find returns the mark of task id, or nil if compact did not fold it.
func (m foldMarks) find(id string) *foldMark {
	i, ok := slices.BinarySearchFunc(m, id, func(f foldMark, id string) int { return strings.Compare(f.rec.ID, id) })
	if !ok {
		return nil
	}
	return &m[i]
}

// compareTokens checks the two marks that keep tokens from going back:
// the counter must be at or above every token the log issued (else the
// next claim could reissue one), and the ceiling's files at or above the
// journal's own ceiling (else a lost journal could be rebuilt below
// tokens already issued: a file deleted or written over by hand).
func (t *Tree) compareTokens(tx journal.Tx, st *replayState, rep *ReplayReport) {
	var top uint64
	for tok := range st.claims {
		top = max(top, tok)
	}
	if c := tx.LastToken(); top > c {
		rep.Findings = append(rep.Findings, Finding{Kind: FindingTokenCounter, Detail: fmt.Sprintf("the token counter is %d, below token %d that the event log issued; replay raises it", c, top)})
		st.counter = top
	}
	want := tx.Ceiling()
	if want == 0 {
		return // no claim since the ceiling files came in
	}
	onFile, found, err := journal.ReadCeiling(t.metaDir)
	switch {
	case err != nil:
		rep.Findings = append(rep.Findings, Finding{Kind: FindingTokenCeiling, Detail: err.Error() + "; replay rewrites it from the journal"})
	case !found || onFile < want:
		rep.Findings = append(rep.Findings, Finding{Kind: FindingTokenCeiling, Detail: fmt.Sprintf("the token ceiling files (%s, %s) are missing or below the journal's ceiling %d; replay rewrites them", journal.CeilingName, journal.RootCeilingName, want)})
	default:
		return
	}
	st.ceiling = want
}

func sameJSON(a, b any) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}

// replayLeaves ends the finding of an entry that is not a task file.
const replayLeaves = "left in place, move it out by hand"

// compareTree lists the state directories and compares them with the
// folded records.
func (t *Tree) compareTree(st *replayState, rep *ReplayReport, scan func() (dirScan, error)) error {
	add := func(f Finding) { rep.Findings = append(rep.Findings, f) }
	// Staging first: a writer on another host that publishes a staged
	// file meanwhile moves it into a state directory not yet listed, so
	// the file is seen in one place or the other, never in neither.
	staging := map[string]bool{}
	if entries, err := t.mirror.List(fsmirror.Staging); err == nil {
		for _, e := range entries {
			staging[e.Name] = e.Kind == fsmirror.Regular
		}
	}
	sc, err := scan()
	if err != nil {
		return err
	}
	rep.Findings = append(rep.Findings, sc.invalid...)
	where, order := sc.where, sc.order
	// Staged files whose writer is dead: the next writer moves them to
	// .fence/quarantine. A staged file a missing task still needs is
	// reported below as misplaced instead.
	needed := st.neededStaged()
	sweeper := "the next writer" // on etcd no writer sweeps: replay does
	if st.ownClock {
		sweeper = "replay"
	}
	if orphans, adopting, err := t.mirror.Sweep(true); err == nil {
		for _, name := range orphans {
			if !needed[name] {
				add(Finding{Kind: FindingOrphanStaged, Dir: string(fsmirror.Staging), Task: name, Detail: "staged by a process that died before its commit; " + sweeper + " moves it to .fence/quarantine"})
			}
		}
		// An inbox file whose adopter died before its commit: the check
		// said the tree agreed while it waited there (found from outside).
		for _, name := range adopting {
			id := strings.TrimPrefix(name, fsmirror.AdoptPrefix)
			if _, known := st.tasks[id]; !known && fsmirror.ValidateID(id) == nil {
				add(Finding{Kind: FindingMisplaced, Task: id, Dir: string(fsmirror.Staging), Detail: "an inbox file whose adoption was cut short before its commit; " + sweeper + " puts it back into inbox/ to be adopted"})
			}
		}
	}
	// An output whose commit landed and whose publish failed (another
	// user's out/ID, a full disk) is still staged: settle publishes only
	// the last commit's, so after another commit it waited unreported
	// (found from outside: replay --check said the tree agreed while a
	// done task's --result was missing from out/).
	latest := map[string]string{} // out/TASK/NAME → the staged name of its last put
	for _, o := range st.outputs {
		latest[o.task+"/"+o.name] = o.staged
	}
	for _, o := range st.outputs {
		if st.settles[o.staged] || t.mirror.StagedHeld(o.staged) {
			continue // the next writer's settle, or a live writer, publishes it
		}
		kept := staging[o.staged] || staging[fsmirror.UnpublishedPrefix+o.staged]
		if kept && latest[o.task+"/"+o.name] != o.staged {
			// A later put of the same name superseded it: published, it
			// would overwrite the newer output (found from outside).
			add(Finding{Kind: FindingOrphanStaged, Task: o.task, Dir: string(fsmirror.Staging), Detail: "output out/" + o.task + "/" + o.name + " kept after its publish failed, since written again by a later put: replay moves it to .fence/quarantine"})
			st.superseded = append(st.superseded, o)
			continue
		}
		if kept {
			add(Finding{Kind: FindingMisplaced, Task: o.task, Dir: string(fsmirror.Staging), Detail: "output out/" + o.task + "/" + o.name + " committed but still staged (its publish failed); replay publishes it"})
			st.publish = append(st.publish, o)
		}
	}
	for _, id := range order {
		dirs := where[id]
		if _, known := st.tasks[id]; known {
			continue
		}
		// A file with more names than the tree holds shares its content
		// with a file outside it (ln of a file elsewhere): a task would
		// change as that file does. inbox/ refuses such a file, and so
		// does replay: reported, left where it is.
		if links, err := t.mirror.Links(dirs[0], id); err == nil && links > uint64(len(dirs)) {
			add(Finding{Kind: FindingInvalidEntry, Task: id, Dir: string(dirs[0]), Detail: fmt.Sprintf("a file the journal does not know, whose content is shared with a file outside the tree (%d names): not adopted; copy it in (cp, not ln) to make it a task, or move it out", links)})
			continue
		}
		to, _ := stateOfDir(dirs[0])
		if to == record.Claimed || to == record.Waiting {
			to = record.Available // no lease, nothing to wait for: the journal knows neither
		}
		add(Finding{Kind: FindingUnknownFile, Task: id, Dir: string(dirs[0]), Detail: "a file the journal does not know; replay adopts it as " + string(to)})
		st.adopt = append(st.adopt, adoption{id: id, from: dirs[0], to: to})
		keep, _ := DirOf(to)
		for _, d := range dirs[1:] {
			t.planExtra(st, rep, extraCopy{id, d, keep}, dirs[0], "")
		}
	}
	// The log's tasks in map order (sorting a million ids costs more than
	// the compare); what is planned for the few out of place is sorted
	// after, and the findings are sorted by the caller.
	for id, rec := range st.tasks {
		want, err := DirOf(rec.State)
		if err != nil { // the log put it in no state fencectl knows
			add(Finding{Kind: FindingLogError, Task: id, Detail: err.Error() + "; replay leaves its file where it is"})
			continue
		}
		dirs := where[id]
		switch {
		case len(dirs) == 0:
			if ok, _ := t.mirror.Exists(fsmirror.Inbox, id); ok {
				add(Finding{Kind: FindingMisplaced, Task: id, Dir: string(fsmirror.Inbox), Detail: "adopted but still in inbox/; replay moves it to " + string(want) + "/"})
				st.moves = append(st.moves, move{id: id, from: fsmirror.Inbox, to: want})
			} else if s := st.staged[id]; s != "" && (staging[s] || staging[fsmirror.UnpublishedPrefix+s]) {
				add(Finding{Kind: FindingMisplaced, Task: id, Dir: string(fsmirror.Staging), Detail: "added but still staged; replay moves it to " + string(want) + "/"})
				st.moves = append(st.moves, move{id: id, from: fsmirror.Staging, staged: s, to: want})
			} else if !settledMissing(rec) {
				what := "replay fails it (reason \"" + ReasonFileMissing + "\"); to run it again, put its content at " + string(record.Failed) + "/" + id + " and requeue it"
				if rec.State == record.Done {
					what = "replay records that its file is gone; the task stays done"
				}
				add(Finding{Kind: FindingMissingFile, Task: id, Dir: string(want), Detail: "the journal has this task in " + string(want) + "/ but its file is in no directory; " + what})
				st.missing = append(st.missing, id)
			}
			continue
		case !containsDir(dirs, want):
			add(Finding{Kind: FindingMisplaced, Task: id, Dir: string(dirs[0]), Detail: "the journal says " + string(want) + "/; replay moves it there"})
			st.moves = append(st.moves, move{id: id, from: dirs[0], to: want})
			src := dirs[0]
			for _, d := range dirs[1:] {
				t.planExtra(st, rep, extraCopy{id, d, want}, src, " (the journal says "+string(want)+"/)")
			}
			continue
		}
		for _, d := range dirs {
			if d != want {
				t.planExtra(st, rep, extraCopy{id, d, want}, want, " (the journal says "+string(want)+"/)")
			}
		}
	}
	slices.SortStableFunc(st.adopt, func(a, b adoption) int { return strings.Compare(a.id, b.id) })
	slices.SortStableFunc(st.moves, func(a, b move) int { return strings.Compare(a.id, b.id) })
	slices.SortStableFunc(st.extra, func(a, b extraCopy) int { return strings.Compare(a.id, b.id) })
	slices.Sort(st.missing)
	return nil
}

// planExtra reports x, a task file besides the one in src that stays
// (and ends up in x.keep), and plans its repair. The same file under a
// second name (same device and inode: a move by link that a crash cut
// between link and unlink) is no second copy: the name is removed, and
// nothing is lost. A real second copy is quarantined.
func (t *Tree) planExtra(st *replayState, rep *ReplayReport, x extraCopy, src fsmirror.Dir, says string) {
	st.extra = append(st.extra, x)
	if same, _ := t.mirror.SameFile(x.dir, src, x.id); same {
		rep.Findings = append(rep.Findings, Finding{Kind: FindingStaleLink, Task: x.id, Dir: string(x.dir), Detail: "the same file as " + string(src) + "/" + x.id + " under a second name, left by a move cut short" + says + "; replay removes this name"})
		return
	}
	rep.Findings = append(rep.Findings, Finding{Kind: FindingDuplicate, Task: x.id, Dir: string(x.dir), Detail: "a second copy" + says + "; replay moves it to .fence/quarantine"})
}

func containsDir(dirs []fsmirror.Dir, d fsmirror.Dir) bool {
	for _, x := range dirs {
		if x == d {
			return true
		}
	}
	return false
}

// lastSeq returns the seq of the log's last event (0: none).
func lastSeq(tx journal.Tx) (seq uint64, err error) {
	err = tx.EventsBackward(func(ev record.Event) (bool, error) {
		seq = ev.Seq
		return false, nil
	})
	return seq, err
}

// ErrJournalMoved says replay found the log longer than when it read it:
// another writer (on etcd, on another host) committed meanwhile, and
// records rebuilt from the shorter log would undo its change.
var ErrJournalMoved = errors.New("the journal changed while replay read it (another writer committed); nothing was rewritten: run replay again")

// repair writes what compareJournal and compareTree found.
func (t *Tree) repair(db journal.Store, st *replayState) error {
	if st.rebuild {
		err := db.Update(func(tx journal.Tx) error {
			// Writers that do not take turns (etcd) may have committed since
			// the log was read: then the records rebuilt from it are stale.
			if seq, err := lastSeq(tx); err != nil {
				return err
			} else if seq != st.lastSeq {
				return ErrJournalMoved
			}
			if err := tx.Reset(); err != nil {
				return err
			}
			for _, rec := range st.tasks {
				if err := tx.PutTask(nil, rec); err != nil {
					return err
				}
			}
			for _, c := range st.claims {
				if err := tx.PutClaim(c); err != nil {
					return err
				}
				if err := trackRequest(tx, c); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("rewrite records from the event log: %w", err)
		}
	}
	if st.counter > 0 {
		if err := db.Update(func(tx journal.Tx) error { return tx.RaiseCounter(st.counter) }); err != nil {
			return fmt.Errorf("raise the token counter: %w", err)
		}
	}
	if st.ceiling > 0 {
		if err := journal.RaiseCeiling(t.metaDir, st.ceiling); err != nil {
			return err
		}
	}
	crashAt("replay:after-rebuild")
	if len(st.adopt) > 0 {
		// Unknown files someone put in the state directories become
		// tasks: their contents durable first (fsmirror.SyncContents).
		byDir := map[fsmirror.Dir][]string{}
		for _, a := range st.adopt {
			byDir[a.from] = append(byDir[a.from], a.id)
		}
		if err := syncContents(t.mirror, byDir); err != nil {
			return t.placeThen(st.moves, fmt.Errorf("adopt unknown files: %w", err))
		}
		var adopted, chunk []adoption
		err := updateInChunks(db, len(st.adopt), func(tx journal.Tx, lo, hi int) error {
			chunk = chunk[:0] // the store may run this more than once
			d, err := tx.Defaults()
			if err != nil {
				return err
			}
			now := tx.Now()
			for _, a := range st.adopt[lo:hi] {
				// A writer on another host may have added or adopted the
				// task since the log was read: then the file is its, not
				// an unknown one.
				if _, known, err := tx.Task(a.id); err != nil || known {
					if err != nil {
						return err
					}
					continue
				}
				_, ev, err := commit(tx, nil, adoptEvent(a.id, a.from, a.to, d.MaxAttempts, now))
				if err != nil {
					return err
				}
				a.seq = ev.Seq
				chunk = append(chunk, a)
			}
			return nil
		}, func() { adopted = append(adopted, chunk...) })
		// The chunks committed before a failure are adopted: their files
		// move below all the same.
		for _, a := range adopted {
			st.ownSeq(a.id, a.seq)
			to, err := DirOf(a.to)
			if err != nil {
				return err
			}
			st.moves = append(st.moves, move{id: a.id, from: a.from, to: to})
		}
		if err != nil {
			return t.placeThen(st.moves, fmt.Errorf("adopt unknown files: %w", err))
		}
	}
	if len(st.missing) > 0 {
		err := updateInChunks(db, len(st.missing), func(tx journal.Tx, lo, hi int) error {
			now := tx.Now()
			for _, id := range st.missing[lo:hi] {
				rec, ok, err := tx.Task(id)
				if err != nil {
					return err
				}
				if ok && !db.Exclusive() && t.touchedSince(tx, id, st.lastSeq) {
					continue // a writer on another host has it in hand
				}
				if ok {
					if _, _, err := commit(tx, &rec, missingEvent(rec, now)); err != nil {
						return err
					}
				}
			}
			return nil
		}, nil)
		if err != nil {
			return t.placeThen(st.moves, fmt.Errorf("settle tasks without a file: %w", err))
		}
	}
	b := t.mirror.NewBatch()
	for i, m := range st.moves {
		if i == 1 {
			crashAt("replay:mid")
		}
		if !db.Exclusive() && t.changedSince(db, m.id, st.seenSeq(m.id)) {
			continue // a writer on another host has it in hand
		}
		if err := t.place(b, m); err != nil {
			return err
		}
	}
	if err := b.Sync(); err != nil {
		return err
	}
	for _, o := range st.publish {
		if err := t.mirror.Publish(o.staged, o.task, o.name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	for _, o := range st.superseded {
		for _, name := range []string{o.staged, fsmirror.UnpublishedPrefix + o.staged} {
			if _, err := t.mirror.Quarantine(fsmirror.Staging, name); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	if !db.Exclusive() {
		defer t.settleAgain(db, st)
	}
	for _, x := range st.extra {
		// The scan of the directories that saw two copies may have seen
		// one file twice, in the two places a writer moved it between.
		if !db.Exclusive() && t.changedSince(db, x.id, st.seenSeq(x.id)) {
			continue
		}
		if dropped, err := t.mirror.DropLink(x.dir, x.id, x.keep, x.id); err != nil || dropped {
			if err != nil {
				return err
			}
			continue
		}
		if _, err := t.mirror.Quarantine(x.dir, x.id); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// touchedSince reports whether task id has an event after seq, or a file
// in some directory: on a store whose writers do not take turns, either
// means the task was not missing after all, or is no longer replay's to
// settle (its file was seen in no directory while another host moved it).
func (t *Tree) touchedSince(tx journal.Tx, id string, seq uint64) bool {
	newer := false
	_ = tx.TaskEventsBackward(id, func(ev record.Event) (bool, error) {
		newer = ev.Seq > seq
		return false, nil
	})
	if newer {
		return true
	}
	_, _, err := t.mirror.Locate(id)
	return err == nil
}

// ownSeq notes that replay's own commit for task id was event seq.
func (st *replayState) ownSeq(id string, seq uint64) {
	if st.own == nil {
		st.own = map[string]uint64{}
	}
	st.own[id] = max(st.own[id], seq)
}

// seenSeq is the last event of task id replay knows of: the log as it
// read it, or its own commit for the task since.
func (st *replayState) seenSeq(id string) uint64 { return max(st.lastSeq, st.own[id]) }

// changedSince reports whether task id has an event after seq, read
// afresh: on a store whose writers do not take turns (etcd), a writer on
// another host has committed a change to it since replay read the log,
// and may be moving its file this very moment, so replay's plan for it is
// stale: moving its file (or setting a second copy aside) would undo that
// writer's move, or take the file an agent was just handed. Left for the
// writer, and for settleAgain. One read per planned move, on etcd only.
func (t *Tree) changedSince(db journal.Store, id string, seq uint64) bool {
	newer := false
	err := db.View(func(tx journal.Tx) error {
		newer = false
		return tx.TaskEventsBackward(id, func(ev record.Event) (bool, error) {
			newer = ev.Seq > seq
			return false, nil
		})
	})
	return err != nil || newer
}

// settleAgain puts the files of the tasks replay moved where the journal
// says they are now. Replay planned its moves from a log read earlier; on
// a store whose writers do not take turns, a writer on another host may
// have committed a change to one of them and moved its file since, and
// replay's move would then undo that writer's. Writers read the journal
// again after their moves for the same reason (reconcile): whoever moves
// last puts the file where the journal says.
func (t *Tree) settleAgain(db journal.Store, st *replayState) {
	var evs []record.Event
	for _, m := range st.moves {
		evs = append(evs, record.Event{Task: m.id})
	}
	for _, x := range st.extra {
		evs = append(evs, record.Event{Task: x.id})
	}
	t.reconcileTasks(db, evs)
}

// Describe renders a finding for people.
func (f Finding) Describe() string {
	var b strings.Builder
	b.WriteString(string(f.Kind))
	if f.Task != "" {
		fmt.Fprintf(&b, " %s", f.Task)
	}
	if f.Dir != "" {
		fmt.Fprintf(&b, " (%s/)", f.Dir)
	}
	fmt.Fprintf(&b, ": %s", f.Detail)
	return b.String()
}

// updateInChunks runs fn over items [0, n) in as few transactions as the
// store takes (see inChunks). fn(tx, lo, hi) writes items lo to hi-1;
// committed (if not nil) is called after each chunk commits. The chunks
// before a failure stand: what replay repairs is repaired item by item.
func updateInChunks(db journal.Store, n int, fn func(tx journal.Tx, lo, hi int) error, committed func()) error {
	return inChunks(n, n, func(lo, hi int) error {
		err := db.Update(func(tx journal.Tx) error { return fn(tx, lo, hi) })
		if err == nil && committed != nil {
			committed()
		}
		return err
	})
}

// inChunks calls try over items [0, n), size at a time, halving size
// whenever try reports journal.ErrTooLarge (a transaction beyond etcd's
// --max-txn-ops; a refused chunk has changed nothing) and going on with
// the size that fitted: the size is learned once, not per chunk. It
// stops at any other error.
func inChunks(n, size int, try func(lo, hi int) error) error {
	for lo := 0; lo < n; {
		hi := min(lo+size, n)
		err := try(lo, hi)
		if errors.Is(err, journal.ErrTooLarge) && size > 1 {
			size /= 2
			continue
		}
		if err != nil {
			return err
		}
		lo = hi
	}
	return nil
}

// placeThen makes moves, which follow journal changes that did commit,
// and returns err, the failure that stopped replay's other changes.
func (t *Tree) placeThen(moves []move, err error) error {
	b := t.mirror.NewBatch()
	for _, m := range moves {
		if perr := t.place(b, m); perr != nil {
			return errors.Join(err, perr)
		}
	}
	return errors.Join(err, b.Sync())
}

// syncContents makes durable the contents of the files byDir names (by
// directory), before a commit makes tasks of them.
func syncContents(m *fsmirror.Mirror, byDir map[fsmirror.Dir][]string) error {
	for _, d := range slices.Sorted(maps.Keys(byDir)) {
		if err := m.SyncContents(d, byDir[d]); err != nil {
			return err
		}
	}
	return nil
}

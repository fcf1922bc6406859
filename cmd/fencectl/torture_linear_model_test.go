package main

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// The sequential specification the linearizability check (torture part 2,
// torture_linear_test.go) holds a recorded history of real processes to: a
// fencing register per task, checked with porcupine. Two forms: partitioned
// by task (model), as porcupine likes it, and the whole tree as one
// register (treeModel), which is stricter and still fast enough here.
//
// What one task's state holds (taskState):
//
//   - its phase (available, claimed, done, failed), its attempts, and the
//     lease: the current token (0 when the claim that set it was killed, so
//     nobody saw the token) and whether the lease has expired;
//   - the highest token known to have been issued for it: a claim must
//     return a token above it. Tokens are global: the partitioned model can
//     only check this per task, so the test also checks that the claim
//     tokens in the event log strictly increase in sequence order and that
//     no token was handed out twice; the whole-tree model checks it across
//     tasks itself (treeState.Max);
//   - for every token whose lease ended by complete, release or fail, which
//     of them ended it: repeating that very call is the idempotent retry
//     (exit 0, "retry": true, nothing changes); anything else with that
//     token, like any token that is not the current one, is fenced (exit 3,
//     nothing changes). A lease ended by reap or revoke has no retry.
//
// Time: every process reads the test clock (FENCE_TEST_CLOCK), which stands
// still while processes run. The test moves it only at a barrier, when no
// process is running, by more than any lease: a "tick" call that expires
// every lease held at that moment. So expiry is a discrete, ordered event,
// and the model is exact about it: verify, heartbeat, put, complete… are
// fenced on an expired lease, revoke still frees it, and every claim (even
// a refused one) and every reap reaps it, counting an attempt (failed/ at
// max attempts).
//
// Partitioned, a call that acts on several tasks appears in several
// partitions (linRoles):
//   - every claim (named, next or restore) first reaps every expired lease
//     in the tree: in the partitions of the other tasks it is a "reap only"
//     copy;
//   - claim-next that answered 4 (nothing to claim) is copied into every
//     partition as "after reaping, this task was not available". The real
//     property ("no task was available at one instant") is cross-partition;
//     the per-task form is weaker but sound (the whole-tree model has the
//     real one);
//   - reap (explicit) and tick go to every partition;
//   - a killed claim-next may have claimed any task: it goes to every
//     partition as a claim with an unknown answer (sound, weaker: only the
//     whole-tree model insists that it claimed at most one).
//
// A call without an answer (SIGKILLed, or told to exit at a crash point of
// the test build) has an unknown outcome: the model is nondeterministic
// there (porcupine's NondeterministicModel, a set of possible states): the
// call either took effect at its linearization point or did not take
// effect at all. Its return time is after everything else (+infinity), so
// it may take effect at any point after its call. The strict check closes
// that window when the process was reaped (c.Return, taken after Wait): a
// dead process makes no system call any more, the kernel has dropped its
// locks, and the next writer only finishes the directory moves of its last
// commit, never its journal transaction; so its effect, if any, lies in
// [call, death].
//
// The model forgets how a token's lease ended once no call that could be
// its retry is left: a call linearized at time x means every call that
// returned before x is already linearized, so after the last call that
// presents token T to complete, release or fail on this task (lastUse), T's
// ending can no longer matter. This keeps the states small and lets
// porcupine's cache merge the branches of unanswered calls.

type linKind uint8

const (
	lkClaim     linKind = iota // claim ID
	lkNext                     // claim (next)
	lkRestore                  // claim ID --token T
	lkHeartbeat                // heartbeat ID --token T
	lkPut                      // put ID NAME --token T
	lkVerify                   // verify ID --token T
	lkComplete                 // complete ID --token T
	lkRelease                  // release ID --token T
	lkFail                     // fail ID --token T
	lkRevoke                   // revoke ID
	lkRequeue                  // requeue ID
	lkReap                     // reap
	lkTick                     // the test moved the clock past every lease
)

var linKindNames = [...]string{"claim", "claim-next", "restore", "heartbeat", "put", "verify", "complete", "release", "fail", "revoke", "requeue", "reap", "tick"}

func (k linKind) String() string { return linKindNames[k] }

// tokenOp reports whether k presents a token.
func (k linKind) tokenOp() bool { return k >= lkRestore && k <= lkFail }

// ends reports whether k ends the lease of the token it presents.
func (k linKind) ends() bool { return k == lkComplete || k == lkRelease || k == lkFail }

// claims reports whether k runs the claim path (which reaps first).
func (k linKind) claims() bool { return k <= lkRestore }

// staleKind says why the test presented a token it knew not to hold.
type staleKind uint8

const (
	staleNone    staleKind = iota
	staleDead              // a token whose lease the test saw end (and how)
	staleOther             // a token issued for another task
	staleNever             // a token the journal cannot have issued
	staleRetry             // deliberate repeat of the call that ended the lease
	staleExpired           // a token held at a tick: its lease expired (or ended before)
)

var staleNames = [...]string{"", "dead", "other-task", "never-issued", "retry", "expired"}

// linReaped is one lease an explicit reap reports.
type linReaped struct {
	Task  string `json:"task"`
	Token uint64 `json:"token"`
	To    string `json:"to"`
}

// linCall is one recorded call of the real binary (or a tick).
type linCall struct {
	ID     int       `json:"id"`
	Client int       `json:"client"`
	Kind   linKind   `json:"kind"`
	Task   string    `json:"task,omitempty"`
	Token  uint64    `json:"token,omitempty"`
	Stale  staleKind `json:"stale,omitempty"`
	Ended  linKind   `json:"ended,omitempty"` // staleDead: how the test saw the lease end
	Agent  string    `json:"agent,omitempty"`
	Call   int64     `json:"call"`             // ns since the start, before exec
	Return int64     `json:"return"`           // ns since the start, after wait
	Killed bool      `json:"killed,omitempty"` // no answer: SIGKILLed, or exited at Crash
	Crash  string    `json:"crash,omitempty"`  // FENCE_CRASH point the call was told to exit at

	Code     int         `json:"code"`
	OutTask  string      `json:"out_task,omitempty"`  // claim, claim-next
	OutToken uint64      `json:"out_token,omitempty"` // claim: token; revoke: revoked token
	Retry    bool        `json:"retry,omitempty"`
	Renewed  bool        `json:"renewed,omitempty"`
	State    string      `json:"state,omitempty"`    // the task's state afterwards (fenced ops, revoke, requeue)
	Attempts *int        `json:"attempts,omitempty"` // the task's attempts afterwards, where the answer says
	Reaped   []linReaped `json:"reaped,omitempty"`
	Stderr   string      `json:"stderr,omitempty"`
}

// linRole says what a copy of a call means in one partition.
type linRole uint8

const (
	roleMain     linRole = iota // the call's own task
	roleReapOnly                // a claim on another task: it reaps this one
	roleNone                    // claim-next answered 4: this task was not available
	roleSkip                    // the call does not concern this task
)

// linIn is a porcupine input: one call as seen by one task's partition.
type linIn struct {
	Part string
	Role linRole
	C    *linCall
}

// linOut is a porcupine output.
type linOut struct {
	Unknown bool
	C       *linCall
}

type phase uint8

const (
	phAvailable phase = iota
	phClaimed
	phDone
	phFailed
)

var phaseNames = [...]string{"available", "claimed", "done", "failed"}

func (p phase) String() string { return phaseNames[p] }

// tokenEnd records how a token's lease on the task ended.
type tokenEnd struct {
	Token uint64
	By    linKind // complete, release, fail, reap, revoke
}

// taskState is one partition's state. It is never mutated: Step returns
// copies, and ends (sorted by token) is copied on write.
type taskState struct {
	Phase    phase
	Token    uint64 // current lease; 0 while claimed means "unknown" (the claim was killed)
	Expired  bool   // the lease ran out at a tick and has not been reaped
	Attempts int
	MaxTok   uint64 // highest token known to have been issued for this task
	Ends     []tokenEnd
}

func (s taskState) endOf(tok uint64) (linKind, bool) {
	i, ok := slices.BinarySearchFunc(s.Ends, tok, func(e tokenEnd, t uint64) int {
		switch {
		case e.Token < t:
			return -1
		case e.Token > t:
			return 1
		}
		return 0
	})
	if !ok {
		return 0, false
	}
	return s.Ends[i].By, true
}

// withEnd returns s with tok's lease recorded as ended by by. Only
// complete, release and fail are recorded: a retry is the repeat of one of
// them, so a lease ended by reap or revoke answers like one never held.
func (s taskState) withEnd(tok uint64, by linKind) taskState {
	if tok > s.MaxTok {
		s.MaxTok = tok
	}
	if tok == 0 || !by.ends() {
		return s
	}
	ends := make([]tokenEnd, 0, len(s.Ends)+1)
	ends = append(ends, s.Ends...)
	i := sort.Search(len(ends), func(i int) bool { return ends[i].Token >= tok })
	if i < len(ends) && ends[i].Token == tok {
		ends[i].By = by
	} else {
		ends = slices.Insert(ends, i, tokenEnd{tok, by})
	}
	s.Ends = ends
	return s
}

// forget drops the endings no call left can ask about: those whose last
// use returned before now (see lastUse).
func (s taskState) forget(part string, now int64, lastUse map[linTokKey]int64) taskState {
	keep := 0
	for _, e := range s.Ends {
		if lastUse[linTokKey{part, e.Token}] >= now {
			keep++
		}
	}
	if keep == len(s.Ends) {
		return s
	}
	ends := make([]tokenEnd, 0, keep)
	for _, e := range s.Ends {
		if lastUse[linTokKey{part, e.Token}] >= now {
			ends = append(ends, e)
		}
	}
	s.Ends = ends
	return s
}

// linTokKey names a token presented on a task.
type linTokKey struct {
	part  string
	token uint64
}

// current reports whether tok authorises on the task now.
func (s taskState) current(tok uint64) bool {
	return s.Phase == phClaimed && s.Token != 0 && s.Token == tok && !s.Expired
}

func (s taskState) equal(o taskState) bool {
	if s.Phase != o.Phase || s.Token != o.Token || s.Expired != o.Expired || s.Attempts != o.Attempts || s.MaxTok != o.MaxTok || len(s.Ends) != len(o.Ends) {
		return false
	}
	if len(s.Ends) > 0 && &s.Ends[0] == &o.Ends[0] {
		return true
	}
	return slices.Equal(s.Ends, o.Ends)
}

func (s taskState) hash() uint64 {
	h := uint64(s.Phase)*0x9e3779b97f4a7c15 ^ s.Token*0xbf58476d1ce4e5b9 ^ s.MaxTok*0x94d049bb133111eb ^ uint64(s.Attempts)<<40 ^ uint64(len(s.Ends))<<48
	if s.Expired {
		h ^= 1 << 63
	}
	return h
}

// linModelConfig configures the model. Bug deliberately breaks one rule,
// to prove the check can fail (self-test only).
type linModelConfig struct {
	MaxAttempts int
	Bug         string // "", "any-token", "no-retry"

	// lastUse: for each token presented to complete, release or fail on a
	// task, the latest return time of such a call (set by linCheck).
	lastUse map[linTokKey]int64
}

// reap frees an expired lease, counting an attempt.
func (m linModelConfig) reap(s taskState) taskState {
	if s.Phase != phClaimed || !s.Expired {
		return s
	}
	s = s.withEnd(s.Token, lkReap)
	s.Phase = m.afterAttempt(s)
	s.Attempts++
	s.Token, s.Expired = 0, false
	return s
}

// afterAttempt is where a lease that ends in a counted attempt sends the
// task (fence.afterAttempt).
func (m linModelConfig) afterAttempt(s taskState) phase {
	if m.MaxAttempts > 0 && s.Attempts+1 >= m.MaxAttempts {
		return phFailed
	}
	return phAvailable
}

func (m linModelConfig) authorises(s taskState, tok uint64) bool {
	if m.Bug == "any-token" {
		return s.Phase == phClaimed && !s.Expired
	}
	return s.current(tok)
}

// steps is the nondeterministic model: the states a call can lead to from
// s given what it answered; none if it cannot have answered that.
func (m linModelConfig) steps(s taskState, in linIn, out linOut) []interface{} {
	var next []taskState
	if out.Unknown {
		next = []taskState{s, m.effect(s, in)}
	} else if ok, after := m.step(s, in, out); ok {
		next = []taskState{after}
	}
	res := make([]interface{}, 0, len(next))
	for i, n := range next {
		if m.lastUse != nil {
			n = n.forget(in.Part, in.C.Call, m.lastUse)
		}
		if i == 1 && n.equal(res[0].(taskState)) {
			break
		}
		res = append(res, n)
	}
	return res
}

// step is the deterministic part of the model: whether call c, seen by
// partition in.Part in role in.Role, can answer what it answered in state
// s, and the state after.
func (m linModelConfig) step(s taskState, in linIn, out linOut) (bool, taskState) {
	c := in.C
	if c.Kind == lkTick {
		if s.Phase == phClaimed {
			s.Expired = true
		}
		return true, s
	}
	switch in.Role {
	case roleReapOnly:
		// The claim ran on another task; its reaps committed whatever it
		// answered (0, 3 or 4). Any other code is checked in its own
		// partition; here it may or may not have reaped.
		if c.Code == exitOK || c.Code == exitFenced || c.Code == exitNotAvailable {
			return true, m.reap(s)
		}
		return true, m.effect(s, in)
	case roleNone:
		s = m.reap(s)
		return c.Code == exitNotAvailable && s.Phase != phAvailable, s
	}
	switch c.Kind {
	case lkClaim, lkNext:
		s = m.reap(s)
		switch c.Code {
		case exitOK:
			if s.Phase != phAvailable || c.OutTask != in.Part || c.OutToken <= s.MaxTok || c.Renewed {
				return false, s
			}
			s.Phase, s.Token, s.MaxTok, s.Expired = phClaimed, c.OutToken, c.OutToken, false
			return reports(c, s), s
		case exitNotAvailable:
			return s.Phase != phAvailable, s
		}
		return false, s
	case lkRestore:
		s = m.reap(s)
		switch c.Code {
		case exitOK:
			return m.authorises(s, c.Token) && c.OutToken == c.Token && c.Renewed && reports(c, s), s
		case exitFenced:
			return !m.authorises(s, c.Token), s
		}
		return false, s
	case lkHeartbeat, lkPut, lkVerify:
		switch c.Code {
		case exitOK:
			return m.authorises(s, c.Token) && !c.Retry && reports(c, s), s
		case exitFenced:
			return !m.authorises(s, c.Token), s
		}
		return false, s
	case lkComplete, lkRelease, lkFail:
		if by, ok := s.endOf(c.Token); ok && by == c.Kind && m.Bug != "no-retry" {
			return c.Code == exitOK && c.Retry, s
		}
		if !m.authorises(s, c.Token) {
			return c.Code == exitFenced, s
		}
		if c.Code != exitOK || c.Retry {
			return false, s
		}
		s = m.end(s, c.Kind)
		return c.State == s.Phase.String() && reports(c, s), s
	case lkRevoke:
		switch c.Code {
		case exitOK:
			if s.Phase != phClaimed {
				return false, s
			}
			if s.Token != 0 && c.OutToken != s.Token || s.Token == 0 && c.OutToken <= s.MaxTok {
				return false, s
			}
			s = s.withEnd(c.OutToken, lkRevoke)
			s.Phase, s.Token, s.Expired = phAvailable, 0, false
			return c.State == s.Phase.String() && reports(c, s), s
		case exitNotAvailable:
			return s.Phase != phClaimed, s
		}
		return false, s
	case lkRequeue:
		switch c.Code {
		case exitOK:
			if s.Phase != phDone && s.Phase != phFailed {
				return false, s
			}
			s.Phase, s.Attempts = phAvailable, 0
			return c.State == s.Phase.String() && reports(c, s), s
		case exitNotAvailable:
			return s.Phase != phDone && s.Phase != phFailed, s
		}
		return false, s
	case lkReap:
		if c.Code != exitOK {
			return false, s
		}
		var got *linReaped
		for i := range c.Reaped {
			if c.Reaped[i].Task == in.Part {
				got = &c.Reaped[i]
			}
		}
		if s.Phase != phClaimed || !s.Expired {
			return got == nil, s
		}
		if got == nil || s.Token != 0 && got.Token != s.Token || s.Token == 0 && got.Token <= s.MaxTok {
			return false, s
		}
		s.Token = got.Token // names the token if the claim's answer was lost
		s = m.reap(s)
		return got.To == s.Phase.String(), s
	}
	return false, s
}

// reports checks what an accepted call's answer says of the task against
// the model's state after it: its state and attempts, where given.
func reports(c *linCall, s taskState) bool {
	if c.State != "" && c.State != s.Phase.String() {
		return false
	}
	return c.Attempts == nil || *c.Attempts == s.Attempts
}

// end applies complete, release or fail by the current token.
func (m linModelConfig) end(s taskState, k linKind) taskState {
	s = s.withEnd(s.Token, k)
	switch k {
	case lkComplete:
		s.Phase = phDone
	case lkRelease:
		s.Phase = phAvailable
	case lkFail:
		s.Phase = m.afterAttempt(s)
		s.Attempts++
	}
	s.Token, s.Expired = 0, false
	return s
}

// effect is what a call whose answer is unknown did if it took effect at
// this point: its change where its precondition holds, nothing otherwise.
// (Not taking effect at all is the other branch, in steps.)
func (m linModelConfig) effect(s taskState, in linIn) taskState {
	c := in.C
	if in.Role == roleReapOnly || in.Role == roleNone {
		return m.reap(s)
	}
	switch c.Kind {
	case lkClaim, lkNext:
		s = m.reap(s)
		if s.Phase == phAvailable {
			// A fresh token nobody saw: above MaxTok, equal to nothing
			// the test will ever present.
			s.Phase, s.Token, s.Expired = phClaimed, 0, false
		}
	case lkRestore:
		s = m.reap(s)
	case lkComplete, lkRelease, lkFail:
		if by, ok := s.endOf(c.Token); ok && by == c.Kind {
			return s
		}
		if m.authorises(s, c.Token) {
			s = m.end(s, c.Kind)
		}
	case lkRevoke:
		if s.Phase == phClaimed {
			s = s.withEnd(s.Token, lkRevoke)
			s.Phase, s.Token, s.Expired = phAvailable, 0, false
		}
	case lkRequeue:
		if s.Phase == phDone || s.Phase == phFailed {
			s.Phase, s.Attempts = phAvailable, 0
		}
	case lkReap:
		s = m.reap(s)
	case lkTick:
		if s.Phase == phClaimed {
			s.Expired = true
		}
	}
	return s
}

// model returns the porcupine model.
func (m linModelConfig) model() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			byTask := map[string][]porcupine.Operation{}
			var parts []string
			for _, op := range history {
				p := op.Input.(linIn).Part
				if _, ok := byTask[p]; !ok {
					parts = append(parts, p)
				}
				byTask[p] = append(byTask[p], op)
			}
			sort.Strings(parts)
			out := make([][]porcupine.Operation, 0, len(parts))
			for _, p := range parts {
				out = append(out, byTask[p])
			}
			return out
		},
		Init: func() []interface{} { return []interface{}{taskState{}} },
		Step: func(state, input, output interface{}) []interface{} {
			return m.steps(state.(taskState), input.(linIn), output.(linOut))
		},
		Equal: func(a, b interface{}) bool { return a.(taskState).equal(b.(taskState)) },
		Hash:  func(s interface{}) uint64 { return s.(taskState).hash() },
		DescribeOperation: func(input, output interface{}) string {
			return describeLinOp(input.(linIn), output.(linOut))
		},
		DescribeState: func(state interface{}) string {
			s := state.(taskState)
			var b strings.Builder
			fmt.Fprintf(&b, "%s", s.Phase)
			if s.Phase == phClaimed {
				if s.Token == 0 {
					b.WriteString(" tok=?")
				} else {
					fmt.Fprintf(&b, " tok=%s", shortTok(s.Token))
				}
				if s.Expired {
					b.WriteString(" expired")
				}
			}
			fmt.Fprintf(&b, " att=%d max=%s ended=%d", s.Attempts, shortTok(s.MaxTok), len(s.Ends))
			return b.String()
		},
	}
	return nm.ToModel()
}

// linCheck checks recorded calls with porcupine. With openKilled, a killed
// call's window stays open to the end of the history instead of closing
// when its process was reaped.
//
// With whole, the history is checked against the unpartitioned model
// (treeModel): stricter, one history instead of one per task.
func linCheck(cfg linModelConfig, calls []*linCall, tasks []string, openKilled, whole, verbose bool, timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo, porcupine.Model, int) {
	ops := linOperations(calls, tasks, openKilled, whole)
	cfg.lastUse = map[linTokKey]int64{}
	for _, op := range ops {
		if c := op.Input.(linIn).C; c.Kind.ends() {
			k := linTokKey{c.Task, c.Token}
			cfg.lastUse[k] = max(cfg.lastUse[k], op.Return)
		}
	}
	model := cfg.model()
	if whole {
		model = cfg.treeModel(tasks)
	}
	if verbose {
		res, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
		return res, info, model, len(ops)
	}
	return porcupine.CheckOperationsTimeout(model, ops, timeout), porcupine.LinearizationInfo{}, model, len(ops)
}

// shortTok prints the last six digits of a token: enough to tell the
// tokens of one run apart (they are microseconds of one clock).
func shortTok(t uint64) string {
	if t < 1_000_000 {
		return fmt.Sprint(t)
	}
	return fmt.Sprintf("…%06d", t%1_000_000)
}

func describeLinOp(in linIn, out linOut) string {
	c := in.C
	var b strings.Builder
	fmt.Fprintf(&b, "#%d %s", c.ID, c.Kind)
	if c.Task != "" {
		fmt.Fprintf(&b, " %s", c.Task)
	}
	if c.Kind.tokenOp() {
		fmt.Fprintf(&b, " tok=%s", shortTok(c.Token))
	}
	if c.Stale != staleNone {
		fmt.Fprintf(&b, " [%s]", staleNames[c.Stale])
	}
	switch in.Role {
	case roleReapOnly:
		b.WriteString(" (reaps here)")
	case roleNone:
		b.WriteString(" (none available)")
	}
	if out.Unknown {
		if c.Crash != "" {
			fmt.Fprintf(&b, " → exited at %s, unknown", c.Crash)
		} else {
			b.WriteString(" → killed, unknown")
		}
		return b.String()
	}
	if c.Kind == lkTick {
		return b.String()
	}
	fmt.Fprintf(&b, " → %d", c.Code)
	if c.OutTask != "" {
		fmt.Fprintf(&b, " %s", c.OutTask)
	}
	if c.OutToken != 0 {
		fmt.Fprintf(&b, " tok=%s", shortTok(c.OutToken))
	}
	if c.Retry {
		b.WriteString(" retry")
	}
	if c.State != "" {
		fmt.Fprintf(&b, " state=%s", c.State)
	}
	if c.Attempts != nil {
		fmt.Fprintf(&b, " att=%d", *c.Attempts)
	}
	for _, r := range c.Reaped {
		fmt.Fprintf(&b, " reaped(%s %s→%s)", r.Task, shortTok(r.Token), r.To)
	}
	return b.String()
}

// linOperations turns recorded calls into porcupine operations, one per
// partition a call concerns. A killed call's answer is unknown; it returns
// when its process was reaped, or with openKilled after everything else.
//
// With whole, every call is one operation on the whole tree (treeModel);
// else one per task it concerns, for the partitioned model.
func linOperations(calls []*linCall, tasks []string, openKilled, whole bool) []porcupine.Operation {
	var end int64
	clients := 0
	for _, c := range calls {
		end = max(end, c.Return, c.Call)
		clients = max(clients, c.Client+1)
	}
	never := end + 1
	if never < end || end == math.MaxInt64 {
		never = math.MaxInt64
	}
	var ops []porcupine.Operation
	for _, c := range calls {
		op := porcupine.Operation{ClientId: c.Client, Call: c.Call, Return: c.Return, Output: linOut{C: c}}
		if c.Killed {
			op.Output = linOut{Unknown: true, C: c}
			if openKilled {
				// Its own lane in the picture: it overlaps its worker's later calls.
				op.ClientId, op.Return = clients, never
			}
		}
		if whole {
			op.Input = linIn{C: c}
			ops = append(ops, op)
			continue
		}
		for i, role := range linRoles(c, tasks) {
			if role != roleSkip {
				op.Input = linIn{Part: tasks[i], Role: role, C: c}
				ops = append(ops, op)
			}
		}
	}
	return ops
}

// linRoles says, for each task, what call c means to it (roleSkip: nothing).
func linRoles(c *linCall, tasks []string) []linRole {
	roles := make([]linRole, len(tasks))
	for i, p := range tasks {
		switch {
		case c.Kind == lkTick || c.Kind == lkReap:
			roles[i] = roleMain
		case c.Kind == lkNext && c.Killed:
			roles[i] = roleMain // may have claimed any task
		case c.Kind == lkNext && c.Code == exitOK:
			roles[i] = roleReapOnly
			if p == c.OutTask {
				roles[i] = roleMain
			}
		case c.Kind == lkNext && c.Code == exitNotAvailable:
			roles[i] = roleNone
		case c.Kind == lkNext:
			// Any other answer: its own task is unknown; checked (and
			// reported) in the first one, reaps everywhere.
			roles[i] = roleReapOnly
			if i == 0 {
				roles[i] = roleMain
			}
		case c.Kind.claims():
			roles[i] = roleReapOnly
			if p == c.Task {
				roles[i] = roleMain
			}
		default:
			roles[i] = roleSkip
			if p == c.Task {
				roles[i] = roleMain
			}
		}
	}
	return roles
}

// treeState is the whole tree's state for the unpartitioned model: one
// taskState per task (in the order of the task list), and the highest token
// known to have been issued anywhere. Never mutated.
type treeState struct {
	Max   uint64
	Tasks []taskState
}

func (s treeState) equal(o treeState) bool {
	if s.Max != o.Max || len(s.Tasks) != len(o.Tasks) {
		return false
	}
	for i := range s.Tasks {
		if !s.Tasks[i].equal(o.Tasks[i]) {
			return false
		}
	}
	return true
}

func (s treeState) hash() uint64 {
	h := s.Max * 0x9e3779b97f4a7c15
	for i, t := range s.Tasks {
		h ^= t.hash()<<(i%7) | t.hash()>>(64-i%7)
		h *= 0xff51afd7ed558ccd
	}
	return h
}

func (s treeState) with(i int, t taskState) treeState {
	tasks := make([]taskState, len(s.Tasks))
	copy(tasks, s.Tasks)
	tasks[i] = t
	return treeState{Max: max(s.Max, t.MaxTok), Tasks: tasks}
}

// treeSteps is the unpartitioned model: every call acts on the whole tree
// in one step. Over the partitioned one it adds: claim-next answering 4
// means no task was available at one instant; a claim's reaps happen on
// every task at once; a killed claim-next claimed at most one task; and a
// claim's token is above every token issued before it on any task.
func (m linModelConfig) treeSteps(s treeState, tasks []string, c *linCall, out linOut) []interface{} {
	roles := linRoles(c, tasks)
	var next []treeState
	switch {
	case !out.Unknown:
		if c.Kind.claims() && c.Kind != lkRestore && c.Code == exitOK && c.OutToken <= s.Max {
			return nil // not above every earlier token
		}
		n := s
		for i, role := range roles {
			if role == roleSkip {
				continue
			}
			ok, t := m.step(s.Tasks[i], linIn{Part: tasks[i], Role: role, C: c}, out)
			if !ok {
				return nil
			}
			n = n.with(i, t)
		}
		next = []treeState{n}
	case c.Kind == lkNext:
		// Took no effect; or reaped everything and then claimed one
		// available task (which one, nobody saw), or none if none was.
		next = []treeState{s}
		reaped := s
		for i := range s.Tasks {
			reaped = reaped.with(i, m.reap(s.Tasks[i]))
		}
		claimed := false
		for i, t := range reaped.Tasks {
			if t.Phase == phAvailable {
				t.Phase, t.Token, t.Expired = phClaimed, 0, false
				next = append(next, reaped.with(i, t))
				claimed = true
			}
		}
		if !claimed {
			next = append(next, reaped)
		}
	default:
		n := s
		for i, role := range roles {
			if role != roleSkip {
				n = n.with(i, m.effect(s.Tasks[i], linIn{Part: tasks[i], Role: role, C: c}))
			}
		}
		next = []treeState{s, n}
	}
	res := make([]interface{}, 0, len(next))
	for _, n := range next {
		if m.lastUse != nil {
			for i := range n.Tasks {
				if f := n.Tasks[i].forget(tasks[i], c.Call, m.lastUse); len(f.Ends) != len(n.Tasks[i].Ends) {
					n = n.with(i, f)
				}
			}
		}
		dup := false
		for _, r := range res {
			dup = dup || r.(treeState).equal(n)
		}
		if !dup {
			res = append(res, n)
		}
	}
	return res
}

// treeModel returns the unpartitioned porcupine model over tasks.
func (m linModelConfig) treeModel(tasks []string) porcupine.Model {
	part := m.model() // for the descriptions
	nm := porcupine.NondeterministicModel{
		Init: func() []interface{} { return []interface{}{treeState{Tasks: make([]taskState, len(tasks))}} },
		Step: func(state, input, output interface{}) []interface{} {
			return m.treeSteps(state.(treeState), tasks, input.(linIn).C, output.(linOut))
		},
		Equal:             func(a, b interface{}) bool { return a.(treeState).equal(b.(treeState)) },
		Hash:              func(s interface{}) uint64 { return s.(treeState).hash() },
		DescribeOperation: part.DescribeOperation,
		DescribeState: func(state interface{}) string {
			s := state.(treeState)
			parts := make([]string, len(s.Tasks))
			for i, t := range s.Tasks {
				parts[i] = tasks[i] + ": " + part.DescribeState([]interface{}{t})
			}
			return strings.Join(parts, "; ")
		},
	}
	return nm.ToModel()
}

// --- unit tests of the model on hand-made histories -------------------

func ptr(n int) *int { return &n }

// hist builds a history; unless given, call i takes [10i+1, 10i+5], one
// after the other.
type hist struct{ calls []*linCall }

func (h *hist) add(c linCall) *linCall {
	c.ID = len(h.calls)
	if c.Call == 0 && c.Return == 0 {
		c.Call, c.Return = int64(10*c.ID+1), int64(10*c.ID+5)
	}
	h.calls = append(h.calls, &c)
	return &c
}

// check checks h both ways (killed windows closed at death, and open) and
// fails if they disagree.
func (h *hist) check(t *testing.T, cfg linModelConfig) porcupine.CheckResult {
	t.Helper()
	res, _, _, _ := linCheck(cfg, h.calls, []string{"a", "b"}, false, false, true, 0)
	open, _, _, _ := linCheck(cfg, h.calls, []string{"a", "b"}, true, false, true, 0)
	whole, _, _, _ := linCheck(cfg, h.calls, []string{"a", "b"}, false, true, true, 0)
	wholeOpen, _, _, _ := linCheck(cfg, h.calls, []string{"a", "b"}, true, true, true, 0)
	if res != open || res != whole || res != wholeOpen {
		t.Errorf("per task, killed windows closed: %s; open: %s; whole tree, closed: %s; open: %s", res, open, whole, wholeOpen)
	}
	return res
}

// legalBase is a legal history over tasks a and b that uses every rule.
func legalBase() *hist {
	h := &hist{}
	h.add(linCall{Kind: lkClaim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
	h.add(linCall{Kind: lkHeartbeat, Task: "a", Token: 100, Code: 0})
	h.add(linCall{Kind: lkVerify, Task: "a", Token: 999, Stale: staleNever, Code: 3})
	h.add(linCall{Kind: lkComplete, Task: "a", Token: 100, Code: 0, State: "done"})
	h.add(linCall{Kind: lkComplete, Task: "a", Token: 100, Stale: staleRetry, Code: 0, Retry: true, State: "done"})
	h.add(linCall{Kind: lkRelease, Task: "a", Token: 100, Stale: staleDead, Code: 3})
	h.add(linCall{Kind: lkClaim, Task: "a", Code: 4})
	h.add(linCall{Kind: lkNext, Code: 0, OutTask: "b", OutToken: 101})
	h.add(linCall{Kind: lkNext, Code: 4})
	h.add(linCall{Kind: lkRevoke, Task: "b", Code: 0, OutToken: 101, State: "available"})
	h.add(linCall{Kind: lkHeartbeat, Task: "b", Token: 101, Stale: staleDead, Code: 3})
	h.add(linCall{Kind: lkRequeue, Task: "a", Code: 0, State: "available"})
	h.add(linCall{Kind: lkRequeue, Task: "b", Code: 4})
	h.add(linCall{Kind: lkClaim, Task: "a", Code: 0, OutTask: "a", OutToken: 105})
	h.add(linCall{Kind: lkComplete, Task: "a", Token: 100, Stale: staleDead, Code: 0, Retry: true, State: "claimed"})
	h.add(linCall{Kind: lkComplete, Task: "b", Token: 105, Stale: staleOther, Code: 3})
	h.add(linCall{Kind: lkTick})
	h.add(linCall{Kind: lkVerify, Task: "a", Token: 105, Code: 3})     // expired
	h.add(linCall{Kind: lkNext, Code: 0, OutTask: "b", OutToken: 110}) // reaps a first
	h.add(linCall{Kind: lkRestore, Task: "a", Token: 105, Code: 3})    // reaped
	h.add(linCall{Kind: lkFail, Task: "b", Token: 110, Code: 0, State: "available", Attempts: ptr(1)})
	h.add(linCall{Kind: lkFail, Task: "b", Token: 110, Code: 0, Retry: true, State: "available"})
	h.add(linCall{Kind: lkClaim, Task: "b", Code: 0, OutTask: "b", OutToken: 111, Attempts: ptr(1)})
	h.add(linCall{Kind: lkRestore, Task: "b", Token: 111, Code: 0, OutToken: 111, Renewed: true})
	h.add(linCall{Kind: lkTick})
	h.add(linCall{Kind: lkRevoke, Task: "b", Code: 0, OutToken: 111, State: "available"}) // expired, not reaped: revoke still frees it
	h.add(linCall{Kind: lkClaim, Task: "b", Code: 0, OutTask: "b", OutToken: 120})
	h.add(linCall{Kind: lkTick})
	h.add(linCall{Kind: lkReap, Code: 0, Reaped: []linReaped{{"b", 120, "failed"}}}) // b's second attempt (fail, then this expiry)
	return h
}

func TestLinearModel_LegalHistoryPasses(t *testing.T) {
	h := legalBase()
	if got := h.check(t, linModelConfig{MaxAttempts: 2}); got != porcupine.Ok {
		t.Fatalf("legal history: %s, want Ok", got)
	}
}

func TestLinearModel_KilledCallsMayOrMayNotHaveHappened(t *testing.T) {
	// Killed claim took effect: the next claim of a is refused, a revoke
	// names a token nobody saw.
	h := &hist{}
	h.add(linCall{Kind: lkClaim, Task: "a", Killed: true})
	h.add(linCall{Kind: lkClaim, Task: "a", Code: 4})
	h.add(linCall{Kind: lkRevoke, Task: "a", Code: 0, OutToken: 77, State: "available"})
	h.add(linCall{Kind: lkClaim, Task: "a", Code: 0, OutTask: "a", OutToken: 80})
	if got := h.check(t, linModelConfig{MaxAttempts: 3}); got != porcupine.Ok {
		t.Errorf("killed claim that took effect: %s, want Ok", got)
	}
	// Killed claim-next and killed complete that did not take effect.
	h = &hist{}
	h.add(linCall{Kind: lkClaim, Task: "a", Code: 0, OutTask: "a", OutToken: 10})
	h.add(linCall{Kind: lkNext, Killed: true})
	h.add(linCall{Kind: lkComplete, Task: "a", Token: 10, Killed: true})
	h.add(linCall{Kind: lkHeartbeat, Task: "a", Token: 10, Code: 0})
	h.add(linCall{Kind: lkClaim, Task: "b", Code: 0, OutTask: "b", OutToken: 12})
	if got := h.check(t, linModelConfig{MaxAttempts: 3}); got != porcupine.Ok {
		t.Errorf("killed calls that did not take effect: %s, want Ok", got)
	}
	// Killed complete that did take effect, then its retry.
	h = &hist{}
	h.add(linCall{Kind: lkClaim, Task: "a", Code: 0, OutTask: "a", OutToken: 10})
	h.add(linCall{Kind: lkComplete, Task: "a", Token: 10, Killed: true})
	h.add(linCall{Kind: lkComplete, Task: "a", Token: 10, Code: 0, Retry: true, State: "done"})
	if got := h.check(t, linModelConfig{MaxAttempts: 3}); got != porcupine.Ok {
		t.Errorf("killed complete then its retry: %s, want Ok", got)
	}
}

func TestLinearModel_IllegalHistoriesAreRejected(t *testing.T) {
	cases := []struct {
		name string
		bad  func(h *hist)
	}{
		{"two claims of a free task get the same token", func(h *hist) {
			h.add(linCall{Kind: lkClaim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
			h.add(linCall{Kind: lkRelease, Task: "a", Token: 100, Code: 0, State: "available"})
			h.add(linCall{Kind: lkClaim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
		}},
		{"a claim's token is below an earlier one", func(h *hist) {
			h.add(linCall{Kind: lkClaim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
			h.add(linCall{Kind: lkRelease, Task: "a", Token: 100, Code: 0, State: "available"})
			h.add(linCall{Kind: lkClaim, Task: "a", Code: 0, OutTask: "a", OutToken: 99})
		}},
		{"two concurrent claims of one task both succeed", func(h *hist) {
			h.add(linCall{Kind: lkClaim, Task: "a", Code: 0, OutTask: "a", OutToken: 100, Call: 1, Return: 10})
			h.add(linCall{Kind: lkNext, Code: 0, OutTask: "a", OutToken: 101, Call: 2, Return: 11})
		}},
		{"complete with a stale token answers 0", func(h *hist) {
			h.add(linCall{Kind: lkClaim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
			h.add(linCall{Kind: lkRevoke, Task: "a", Code: 0, OutToken: 100, State: "available"})
			h.add(linCall{Kind: lkClaim, Task: "a", Code: 0, OutTask: "a", OutToken: 101})
			h.add(linCall{Kind: lkComplete, Task: "a", Token: 100, Stale: staleDead, Code: 0, State: "done"})
		}},
		{"retry of another call than the one that ended the lease", func(h *hist) {
			h.add(linCall{Kind: lkClaim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
			h.add(linCall{Kind: lkComplete, Task: "a", Token: 100, Code: 0, State: "done"})
			h.add(linCall{Kind: lkRelease, Task: "a", Token: 100, Code: 0, Retry: true, State: "done"})
		}},
		{"token of another task accepted", func(h *hist) {
			h.add(linCall{Kind: lkClaim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
			h.add(linCall{Kind: lkClaim, Task: "b", Code: 0, OutTask: "b", OutToken: 101})
			h.add(linCall{Kind: lkHeartbeat, Task: "b", Token: 100, Stale: staleOther, Code: 0})
		}},
		{"verify of an expired lease answers 0", func(h *hist) {
			h.add(linCall{Kind: lkClaim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
			h.add(linCall{Kind: lkTick})
			h.add(linCall{Kind: lkVerify, Task: "a", Token: 100, Code: 0})
		}},
		{"the current holder is refused", func(h *hist) {
			h.add(linCall{Kind: lkClaim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
			h.add(linCall{Kind: lkPut, Task: "a", Token: 100, Code: 3})
		}},
		{"claim-next says nothing is free while a is free", func(h *hist) {
			h.add(linCall{Kind: lkClaim, Task: "b", Code: 0, OutTask: "b", OutToken: 100})
			h.add(linCall{Kind: lkNext, Code: 4})
		}},
		{"fail at max attempts does not go to failed", func(h *hist) {
			h.add(linCall{Kind: lkClaim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
			h.add(linCall{Kind: lkFail, Task: "a", Token: 100, Code: 0, State: "available"})
			h.add(linCall{Kind: lkClaim, Task: "a", Code: 0, OutTask: "a", OutToken: 101})
			h.add(linCall{Kind: lkFail, Task: "a", Token: 101, Code: 0, State: "available"})
		}},
		{"a killed claim cannot explain a second holder", func(h *hist) {
			h.add(linCall{Kind: lkClaim, Task: "a", Killed: true})
			h.add(linCall{Kind: lkClaim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
			h.add(linCall{Kind: lkRevoke, Task: "a", Code: 0, OutToken: 100, State: "available"})
			h.add(linCall{Kind: lkRevoke, Task: "a", Code: 0, OutToken: 90, State: "available"})
		}},
		{"a claim reports the attempts wrong", func(h *hist) {
			h.add(linCall{Kind: lkClaim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
			h.add(linCall{Kind: lkFail, Task: "a", Token: 100, Code: 0, State: "available", Attempts: ptr(1)})
			h.add(linCall{Kind: lkClaim, Task: "a", Code: 0, OutTask: "a", OutToken: 101, Attempts: ptr(0)})
		}},
		{"requeue of a claimed task", func(h *hist) {
			h.add(linCall{Kind: lkClaim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
			h.add(linCall{Kind: lkRequeue, Task: "a", Code: 0, State: "available"})
		}},
		{"an expired lease is not reported by reap", func(h *hist) {
			h.add(linCall{Kind: lkClaim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
			h.add(linCall{Kind: lkTick})
			h.add(linCall{Kind: lkReap, Code: 0})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := &hist{}
			tc.bad(h)
			if got := h.check(t, linModelConfig{MaxAttempts: 2}); got != porcupine.Illegal {
				t.Errorf("%s, want Illegal", got)
			}
		})
	}
}

func TestLinearModel_BrokenRulesRejectALegalHistory(t *testing.T) {
	for _, bug := range []string{"any-token", "no-retry"} {
		if got := legalBase().check(t, linModelConfig{MaxAttempts: 2, Bug: bug}); got != porcupine.Illegal {
			t.Errorf("model with bug %q on the legal history: %s, want Illegal", bug, got)
		}
	}
}

// Package model is the sequential specification the linearizability check
// of the torture suite (cmd/fencectl/torture, part 2) holds a recorded
// history of real fencectl processes to: a fencing register per task,
// checked with porcupine. It is ordinary code, not a test file, so that it
// has unit tests of its own (model_test.go). Two forms: partitioned by
// task (Config.model), as porcupine likes it, and the whole tree as one
// register (Config.treeModel), which is stricter and still fast enough.
//
// What one task's state holds (taskState):
//
//   - its phase (available, claimed, done, failed; failed by a cancel or
//     not), its attempts, and the
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
//     nothing changes). A lease ended by reap, revoke or cancel has no
//     retry. A cancel itself is retried by cancelling again: success,
//     nothing changes, while the task is still failed by that cancel.
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
// partitions (rolesOf):
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
package model

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// fencectl's exit codes the model reasons about (README, "Exit codes").
const (
	codeOK           = 0
	codeFenced       = 3
	codeNotAvailable = 4
)

// Kind is what a recorded call did.
type Kind uint8

const (
	Claim     Kind = iota // claim ID
	Next                  // claim (next)
	Restore               // claim ID --token T
	Heartbeat             // heartbeat ID --token T
	Put                   // put ID NAME --token T
	Verify                // verify ID --token T
	Complete              // complete ID --token T
	Release               // release ID --token T
	Fail                  // fail ID --token T
	Revoke                // revoke ID
	Requeue               // requeue ID
	Reap                  // reap
	Tick                  // the test moved the clock past every lease
	Cancel                // cancel ID (saved histories keep their kinds' numbers: add new ones last)
	Batch                 // claim ID ID…: all of the named tasks, each with its own token, or none
)

var kindNames = [...]string{"claim", "claim-next", "restore", "heartbeat", "put", "verify", "complete", "release", "fail", "revoke", "requeue", "reap", "tick", "cancel", "claim-batch"}

func (k Kind) String() string { return kindNames[k] }

// TokenOp reports whether k presents a token.
func (k Kind) TokenOp() bool { return k >= Restore && k <= Fail }

// Ends reports whether k ends the lease of the token it presents.
func (k Kind) Ends() bool { return k == Complete || k == Release || k == Fail }

// Claims reports whether k runs the claim path (which reaps first).
func (k Kind) Claims() bool { return k <= Restore || k == Batch }

// Stale says why the test presented a token it knew not to hold.
type Stale uint8

const (
	StaleNone    Stale = iota
	StaleDead          // a token whose lease the test saw end (and how)
	StaleOther         // a token issued for another task
	StaleNever         // a token the journal cannot have issued
	StaleRetry         // deliberate repeat of the call that ended the lease
	StaleExpired       // a token held at a tick: its lease expired (or ended before)
)

var staleNames = [...]string{"", "dead", "other-task", "never-issued", "retry", "expired"}

func (k Stale) String() string { return staleNames[k] }

// Reaped is one lease an explicit reap reports.
type Reaped struct {
	Task  string `json:"task"`
	Token uint64 `json:"token"`
	To    string `json:"to"`
}

// Call is one recorded call of the real binary (or a tick).
type Call struct {
	ID     int      `json:"id"`
	Client int      `json:"client"`
	Kind   Kind     `json:"kind"`
	Task   string   `json:"task,omitempty"`
	Tasks  []string `json:"tasks,omitempty"` // claim-batch: the named tasks
	Token  uint64   `json:"token,omitempty"`
	Stale  Stale    `json:"stale,omitempty"`
	Ended  Kind     `json:"ended,omitempty"` // StaleDead: how the test saw the lease end
	Agent  string   `json:"agent,omitempty"`
	Call   int64    `json:"call"`             // ns since the start, before exec
	Return int64    `json:"return"`           // ns since the start, after wait
	Killed bool     `json:"killed,omitempty"` // no answer: SIGKILLed, or exited at Crash
	Crash  string   `json:"crash,omitempty"`  // FENCE_CRASH point the call was told to exit at

	Code     int    `json:"code"`
	OutTask  string `json:"out_task,omitempty"`  // claim, claim-next
	OutToken uint64 `json:"out_token,omitempty"` // claim: token; revoke, cancel: the token whose lease it ended
	// OutTokens, for a claim-batch that succeeded, are the tokens of
	// Tasks, in the same order.
	OutTokens []uint64 `json:"out_tokens,omitempty"`
	Retry     bool     `json:"retry,omitempty"`
	Renewed   bool     `json:"renewed,omitempty"`
	State     string   `json:"state,omitempty"`    // the task's state afterwards (fenced ops, revoke, requeue, cancel)
	Attempts  *int     `json:"attempts,omitempty"` // the task's attempts afterwards, where the answer says
	Reaped    []Reaped `json:"reaped,omitempty"`
	Stderr    string   `json:"stderr,omitempty"`
}

// role says what a copy of a call means in one partition.
type role uint8

const (
	roleMain     role = iota // the call's own task
	roleReapOnly             // a claim on another task: it reaps this one
	roleNone                 // claim-next answered 4: this task was not available
	roleSkip                 // the call does not concern this task
)

// opIn is a porcupine input: one call as seen by one task's partition.
type opIn struct {
	Part string
	Role role
	C    *Call
}

// opOut is a porcupine output.
type opOut struct {
	Unknown bool
	C       *Call
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
	By    Kind // complete, release, fail, reap, revoke, cancel
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
	// Cancelled: failed by a cancel (not requeued since), so a cancel
	// again is its retry, where a task failed otherwise refuses it.
	Cancelled bool
}

func (s taskState) endOf(tok uint64) (Kind, bool) {
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
func (s taskState) withEnd(tok uint64, by Kind) taskState {
	if tok > s.MaxTok {
		s.MaxTok = tok
	}
	if tok == 0 || !by.Ends() {
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
func (s taskState) forget(part string, now int64, lastUse map[tokKey]int64) taskState {
	keep := 0
	for _, e := range s.Ends {
		if lastUse[tokKey{part, e.Token}] >= now {
			keep++
		}
	}
	if keep == len(s.Ends) {
		return s
	}
	ends := make([]tokenEnd, 0, keep)
	for _, e := range s.Ends {
		if lastUse[tokKey{part, e.Token}] >= now {
			ends = append(ends, e)
		}
	}
	s.Ends = ends
	return s
}

// tokKey names a token presented on a task.
type tokKey struct {
	part  string
	token uint64
}

// current reports whether tok authorises on the task now.
func (s taskState) current(tok uint64) bool {
	return s.Phase == phClaimed && s.Token != 0 && s.Token == tok && !s.Expired
}

func (s taskState) equal(o taskState) bool {
	if s.Phase != o.Phase || s.Token != o.Token || s.Expired != o.Expired || s.Cancelled != o.Cancelled || s.Attempts != o.Attempts || s.MaxTok != o.MaxTok || len(s.Ends) != len(o.Ends) {
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
	if s.Cancelled {
		h ^= 1 << 62
	}
	return h
}

// Config configures the model. Bug deliberately breaks one rule,
// to prove the check can fail (self-test only).
type Config struct {
	MaxAttempts int
	Bug         string // "", "any-token", "no-retry"

	// lastUse: for each token presented to complete, release or fail on a
	// task, the latest return time of such a call (set by Check).
	lastUse map[tokKey]int64
}

// reap frees an expired lease, counting an attempt.
func (m Config) reap(s taskState) taskState {
	if s.Phase != phClaimed || !s.Expired {
		return s
	}
	s = s.withEnd(s.Token, Reap)
	s.Phase = m.afterAttempt(s)
	s.Attempts++
	s.Token, s.Expired = 0, false
	return s
}

// cancel ends the task in failed/: the lease of tok (0: none) ends, no
// attempt is counted.
func (m Config) cancel(s taskState, tok uint64) taskState {
	s = s.withEnd(tok, Cancel)
	s.Phase, s.Token, s.Expired, s.Cancelled = phFailed, 0, false, true
	return s
}

// afterAttempt is where a lease that ends in a counted attempt sends the
// task (fence.afterAttempt).
func (m Config) afterAttempt(s taskState) phase {
	if m.MaxAttempts > 0 && s.Attempts+1 >= m.MaxAttempts {
		return phFailed
	}
	return phAvailable
}

func (m Config) authorises(s taskState, tok uint64) bool {
	if m.Bug == "any-token" {
		return s.Phase == phClaimed && !s.Expired
	}
	return s.current(tok)
}

// steps is the nondeterministic model: the states a call can lead to from
// s given what it answered; none if it cannot have answered that.
func (m Config) steps(s taskState, in opIn, out opOut) []interface{} {
	var next []taskState
	if out.Unknown {
		next = []taskState{s, m.effect(s, in)}
	} else if reapsMayRollBack(in) {
		next = []taskState{s, m.reap(s)}
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

// reapsMayRollBack reports whether in is a refused claim on another task
// whose reaps of this one may have been rolled back with the refusal: a
// refusal changes nothing unless it is about a task the claim itself
// reaped (fence.keepsReaps), and this partition cannot see which task
// the refusal was about. Claim-next's "nothing to claim" commits its
// reaps.
func reapsMayRollBack(in opIn) bool {
	c := in.C
	if in.Role != roleReapOnly {
		return false
	}
	return c.Code == codeFenced || c.Code == codeNotAvailable && c.Kind != Next
}

// step is the deterministic part of the model: whether call c, seen by
// partition in.Part in role in.Role, can answer what it answered in state
// s, and the state after.
func (m Config) step(s taskState, in opIn, out opOut) (bool, taskState) {
	c := in.C
	if c.Kind == Tick {
		if s.Phase == phClaimed {
			s.Expired = true
		}
		return true, s
	}
	switch in.Role {
	case roleReapOnly:
		// The claim ran on another task; its reaps committed if it
		// claimed or found nothing to claim (a refusal's may have rolled
		// back: reapsMayRollBack). Any other code is checked in its own
		// partition; here it may or may not have reaped.
		if c.Code == codeOK || c.Code == codeFenced || c.Code == codeNotAvailable {
			return true, m.reap(s)
		}
		return true, m.effect(s, in)
	case roleNone:
		s = m.reap(s)
		return c.Code == codeNotAvailable && s.Phase != phAvailable, s
	}
	switch c.Kind {
	case Claim, Next:
		s = m.reap(s)
		switch c.Code {
		case codeOK:
			if s.Phase != phAvailable || c.OutTask != in.Part || c.OutToken <= s.MaxTok || c.Renewed {
				return false, s
			}
			s.Phase, s.Token, s.MaxTok, s.Expired = phClaimed, c.OutToken, c.OutToken, false
			return reports(c, s), s
		case codeNotAvailable:
			return s.Phase != phAvailable, s
		}
		return false, s
	case Batch:
		s = m.reap(s)
		i := slices.Index(c.Tasks, in.Part)
		switch c.Code {
		case codeOK:
			if i < 0 || len(c.OutTokens) != len(c.Tasks) || s.Phase != phAvailable || c.OutTokens[i] <= s.MaxTok {
				return false, s
			}
			s.Phase, s.Token, s.MaxTok, s.Expired = phClaimed, c.OutTokens[i], c.OutTokens[i], false
			return true, s
		case codeNotAvailable:
			// All or nothing: this task is unchanged (but for the reap),
			// whatever its state; that one of the named tasks was not
			// available is a property of several tasks (treeSteps).
			return true, s
		}
		return false, s
	case Restore:
		s = m.reap(s)
		switch c.Code {
		case codeOK:
			return m.authorises(s, c.Token) && c.OutToken == c.Token && c.Renewed && reports(c, s), s
		case codeFenced:
			return !m.authorises(s, c.Token), s
		}
		return false, s
	case Heartbeat, Put, Verify:
		switch c.Code {
		case codeOK:
			return m.authorises(s, c.Token) && !c.Retry && reports(c, s), s
		case codeFenced:
			return !m.authorises(s, c.Token), s
		}
		return false, s
	case Complete, Release, Fail:
		if by, ok := s.endOf(c.Token); ok && by == c.Kind && m.Bug != "no-retry" {
			return c.Code == codeOK && c.Retry, s
		}
		if !m.authorises(s, c.Token) {
			return c.Code == codeFenced, s
		}
		if c.Code != codeOK || c.Retry {
			return false, s
		}
		s = m.end(s, c.Kind)
		return c.State == s.Phase.String() && reports(c, s), s
	case Revoke:
		switch c.Code {
		case codeOK:
			if s.Phase != phClaimed {
				return false, s
			}
			if s.Token != 0 && c.OutToken != s.Token || s.Token == 0 && c.OutToken <= s.MaxTok {
				return false, s
			}
			s = s.withEnd(c.OutToken, Revoke)
			s.Phase, s.Token, s.Expired = phAvailable, 0, false
			return c.State == s.Phase.String() && reports(c, s), s
		case codeNotAvailable:
			return s.Phase != phClaimed, s
		}
		return false, s
	case Requeue:
		switch c.Code {
		case codeOK:
			if s.Phase != phDone && s.Phase != phFailed {
				return false, s
			}
			s.Phase, s.Attempts, s.Cancelled = phAvailable, 0, false
			return c.State == s.Phase.String() && reports(c, s), s
		case codeNotAvailable:
			return s.Phase != phDone && s.Phase != phFailed, s
		}
		return false, s
	case Cancel:
		switch c.Code {
		case codeOK:
			if c.Retry {
				return s.Phase == phFailed && s.Cancelled && c.OutToken == 0 && reports(c, s), s
			}
			switch s.Phase {
			case phAvailable:
				if c.OutToken != 0 {
					return false, s
				}
			case phClaimed: // expired or not: the cancel ends the lease
				if s.Token != 0 && c.OutToken != s.Token || s.Token == 0 && c.OutToken <= s.MaxTok {
					return false, s
				}
			default:
				return false, s
			}
			s = m.cancel(s, c.OutToken)
			return c.State == s.Phase.String() && reports(c, s), s
		case codeNotAvailable:
			return s.Phase == phDone || s.Phase == phFailed && !s.Cancelled, s
		}
		return false, s
	case Reap:
		if c.Code != codeOK {
			return false, s
		}
		var got *Reaped
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
func reports(c *Call, s taskState) bool {
	if c.State != "" && c.State != s.Phase.String() {
		return false
	}
	return c.Attempts == nil || *c.Attempts == s.Attempts
}

// end applies complete, release or fail by the current token.
func (m Config) end(s taskState, k Kind) taskState {
	s = s.withEnd(s.Token, k)
	switch k {
	case Complete:
		s.Phase = phDone
	case Release:
		s.Phase = phAvailable
	case Fail:
		s.Phase = m.afterAttempt(s)
		s.Attempts++
	}
	s.Token, s.Expired = 0, false
	return s
}

// effect is what a call whose answer is unknown did if it took effect at
// this point: its change where its precondition holds, nothing otherwise.
// (Not taking effect at all is the other branch, in steps.)
func (m Config) effect(s taskState, in opIn) taskState {
	c := in.C
	if in.Role == roleReapOnly || in.Role == roleNone {
		return m.reap(s)
	}
	switch c.Kind {
	case Claim, Next, Batch:
		// (A batch claims all or none: per task this is weaker, and
		// treeSteps holds it to all or none.)
		s = m.reap(s)
		if s.Phase == phAvailable {
			// A fresh token nobody saw: above MaxTok, equal to nothing
			// the test will ever present.
			s.Phase, s.Token, s.Expired = phClaimed, 0, false
		}
	case Restore:
		s = m.reap(s)
	case Complete, Release, Fail:
		if by, ok := s.endOf(c.Token); ok && by == c.Kind {
			return s
		}
		if m.authorises(s, c.Token) {
			s = m.end(s, c.Kind)
		}
	case Revoke:
		if s.Phase == phClaimed {
			s = s.withEnd(s.Token, Revoke)
			s.Phase, s.Token, s.Expired = phAvailable, 0, false
		}
	case Requeue:
		if s.Phase == phDone || s.Phase == phFailed {
			s.Phase, s.Attempts, s.Cancelled = phAvailable, 0, false
		}
	case Cancel:
		if s.Phase == phAvailable || s.Phase == phClaimed {
			s = m.cancel(s, s.Token)
		}
	case Reap:
		s = m.reap(s)
	case Tick:
		if s.Phase == phClaimed {
			s.Expired = true
		}
	}
	return s
}

// model returns the porcupine model.
func (m Config) model() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			byTask := map[string][]porcupine.Operation{}
			var parts []string
			for _, op := range history {
				p := op.Input.(opIn).Part
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
			return m.steps(state.(taskState), input.(opIn), output.(opOut))
		},
		Equal: func(a, b interface{}) bool { return a.(taskState).equal(b.(taskState)) },
		Hash:  func(s interface{}) uint64 { return s.(taskState).hash() },
		DescribeOperation: func(input, output interface{}) string {
			return describeOp(input.(opIn), output.(opOut))
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
			if s.Cancelled {
				b.WriteString(" (cancelled)")
			}
			fmt.Fprintf(&b, " att=%d max=%s ended=%d", s.Attempts, shortTok(s.MaxTok), len(s.Ends))
			return b.String()
		},
	}
	return nm.ToModel()
}

// Options say how Check reads a history.
type Options struct {
	// OpenKilled keeps a killed call's window open to the end of the
	// history instead of closing it when its process was reaped.
	OpenKilled bool
	// Whole checks the history against the unpartitioned model
	// (treeModel): stricter, one history instead of one per task.
	Whole bool
	// Verbose asks porcupine for the linearization info (for its picture).
	Verbose bool
	// Timeout bounds porcupine; 0 means no bound.
	Timeout time.Duration
}

// Check checks recorded calls over tasks with porcupine. It returns the
// result, the linearization info (with Verbose), the model used and the
// number of operations checked.
func Check(cfg Config, calls []*Call, tasks []string, opt Options) (porcupine.CheckResult, porcupine.LinearizationInfo, porcupine.Model, int) {
	ops := operations(calls, tasks, opt.OpenKilled, opt.Whole)
	cfg.lastUse = map[tokKey]int64{}
	for _, op := range ops {
		if c := op.Input.(opIn).C; c.Kind.Ends() {
			k := tokKey{c.Task, c.Token}
			cfg.lastUse[k] = max(cfg.lastUse[k], op.Return)
		}
	}
	model := cfg.model()
	if opt.Whole {
		model = cfg.treeModel(tasks)
	}
	if opt.Verbose {
		res, info := porcupine.CheckOperationsVerbose(model, ops, opt.Timeout)
		return res, info, model, len(ops)
	}
	return porcupine.CheckOperationsTimeout(model, ops, opt.Timeout), porcupine.LinearizationInfo{}, model, len(ops)
}

// shortTok prints the last six digits of a token: enough to tell the
// tokens of one run apart (they are microseconds of one clock).
func shortTok(t uint64) string {
	if t < 1_000_000 {
		return fmt.Sprint(t)
	}
	return fmt.Sprintf("…%06d", t%1_000_000)
}

func describeOp(in opIn, out opOut) string {
	c := in.C
	var b strings.Builder
	fmt.Fprintf(&b, "#%d %s", c.ID, c.Kind)
	if c.Task != "" {
		fmt.Fprintf(&b, " %s", c.Task)
	}
	if len(c.Tasks) > 0 {
		fmt.Fprintf(&b, " %s", strings.Join(c.Tasks, ","))
		for _, t := range c.OutTokens {
			fmt.Fprintf(&b, " tok=%s", shortTok(t))
		}
	}
	if c.Kind.TokenOp() {
		fmt.Fprintf(&b, " tok=%s", shortTok(c.Token))
	}
	if c.Stale != StaleNone {
		fmt.Fprintf(&b, " [%s]", c.Stale)
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
	if c.Kind == Tick {
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

// operations turns recorded calls into porcupine operations, one per
// partition a call concerns. A killed call's answer is unknown; it returns
// when its process was reaped, or with openKilled after everything else.
//
// With whole, every call is one operation on the whole tree (treeModel);
// else one per task it concerns, for the partitioned model.
func operations(calls []*Call, tasks []string, openKilled, whole bool) []porcupine.Operation {
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
		op := porcupine.Operation{ClientId: c.Client, Call: c.Call, Return: c.Return, Output: opOut{C: c}}
		if c.Killed {
			op.Output = opOut{Unknown: true, C: c}
			if openKilled {
				// Its own lane in the picture: it overlaps its worker's later calls.
				op.ClientId, op.Return = clients, never
			}
		}
		if whole {
			op.Input = opIn{C: c}
			ops = append(ops, op)
			continue
		}
		for i, role := range rolesOf(c, tasks) {
			if role != roleSkip {
				op.Input = opIn{Part: tasks[i], Role: role, C: c}
				ops = append(ops, op)
			}
		}
	}
	return ops
}

// rolesOf says, for each task, what call c means to it (roleSkip: nothing).
func rolesOf(c *Call, tasks []string) []role {
	roles := make([]role, len(tasks))
	for i, p := range tasks {
		switch {
		case c.Kind == Tick || c.Kind == Reap:
			roles[i] = roleMain
		case c.Kind == Next && c.Killed:
			roles[i] = roleMain // may have claimed any task
		case c.Kind == Next && c.Code == codeOK:
			roles[i] = roleReapOnly
			if p == c.OutTask {
				roles[i] = roleMain
			}
		case c.Kind == Next && c.Code == codeNotAvailable:
			roles[i] = roleNone
		case c.Kind == Next:
			// Any other answer: its own task is unknown; checked (and
			// reported) in the first one, reaps everywhere.
			roles[i] = roleReapOnly
			if i == 0 {
				roles[i] = roleMain
			}
		case c.Kind == Batch:
			roles[i] = roleReapOnly
			if slices.Contains(c.Tasks, p) {
				roles[i] = roleMain
			}
		case c.Kind.Claims():
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
func (m Config) treeSteps(s treeState, tasks []string, c *Call, out opOut) []interface{} {
	roles := rolesOf(c, tasks)
	var next []treeState
	switch {
	case !out.Unknown:
		if c.Kind.Claims() && c.Kind != Restore && c.Kind != Batch && c.Code == codeOK && c.OutToken <= s.Max {
			return nil // not above every earlier token
		}
		if c.Kind == Batch && c.Code == codeOK && !batchTokens(c.OutTokens, s.Max) {
			return nil // each above every earlier token, no two alike
		}
		n := s
		for i, role := range roles {
			if role == roleSkip {
				continue
			}
			ok, t := m.step(s.Tasks[i], opIn{Part: tasks[i], Role: role, C: c}, out)
			if !ok {
				return nil
			}
			n = n.with(i, t)
		}
		if c.Kind == Batch && c.Code == codeNotAvailable && !anyUnavailable(n, tasks, c.Tasks) {
			return nil // refused while every named task could be claimed
		}
		next = []treeState{n}
		if refusedClaim(c) {
			// A refusal changes nothing, the reaps before it included,
			// unless it is about a task the claim itself reaped
			// (fence.keepsReaps): which one a batch's is, nobody saw.
			switch {
			case !reapsNamed(s, tasks, c):
				next = []treeState{s}
			case c.Kind == Batch:
				next = []treeState{s, n}
			}
		}
	case c.Kind == Batch:
		// Took no effect; or reaped everything and then claimed every
		// named task if all were available, none otherwise.
		reaped := s
		for i := range s.Tasks {
			reaped = reaped.with(i, m.reap(s.Tasks[i]))
		}
		next = []treeState{s, reaped}
		if !anyUnavailable(reaped, tasks, c.Tasks) {
			all := reaped
			for i, p := range tasks {
				if slices.Contains(c.Tasks, p) {
					t := all.Tasks[i]
					t.Phase, t.Token, t.Expired = phClaimed, 0, false
					all = all.with(i, t)
				}
			}
			next = []treeState{s, all}
		}
	case c.Kind == Next:
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
				n = n.with(i, m.effect(s.Tasks[i], opIn{Part: tasks[i], Role: role, C: c}))
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

// refusedClaim reports whether c is a claim of named tasks (claim ID,
// restore, batch) that was refused: claim-next's "nothing to claim"
// commits its reaps, and so does a claim that succeeded.
func refusedClaim(c *Call) bool {
	return c.Kind.Claims() && c.Kind != Next && (c.Code == codeFenced || c.Code == codeNotAvailable)
}

// reapsNamed reports whether c, in tree state s, reaps one of the tasks
// it names: an expired lease on it.
func reapsNamed(s treeState, tasks []string, c *Call) bool {
	for i, p := range tasks {
		if (p == c.Task || slices.Contains(c.Tasks, p)) && s.Tasks[i].Phase == phClaimed && s.Tasks[i].Expired {
			return true
		}
	}
	return false
}

// anyUnavailable reports whether one of the named tasks is not available
// in s (or is no task of the tree): a batch claim of them is refused.
func anyUnavailable(s treeState, tasks, named []string) bool {
	for _, p := range named {
		i := slices.Index(tasks, p)
		if i < 0 || s.Tasks[i].Phase != phAvailable {
			return true
		}
	}
	return false
}

// batchTokens reports whether a batch's tokens are all above max and
// distinct.
func batchTokens(toks []uint64, max uint64) bool {
	for i, t := range toks {
		if t <= max || slices.Contains(toks[:i], t) {
			return false
		}
	}
	return true
}

// treeModel returns the unpartitioned porcupine model over tasks.
func (m Config) treeModel(tasks []string) porcupine.Model {
	part := m.model() // for the descriptions
	nm := porcupine.NondeterministicModel{
		Init: func() []interface{} { return []interface{}{treeState{Tasks: make([]taskState, len(tasks))}} },
		Step: func(state, input, output interface{}) []interface{} {
			return m.treeSteps(state.(treeState), tasks, input.(opIn).C, output.(opOut))
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

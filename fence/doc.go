// Package fence is fencectl's domain: task states, leases, fencing tokens,
// the rules of every transition and the typed errors an agent reads when it
// is refused; and the Tree, which runs each operation as "one journal
// transaction, then the mirror's renames".
//
// # Rules are pure
//
// Whether a token authorises an action, what state follows and what event
// records it are decided by functions in rules.go that take records and a
// time and do no I/O. The live path and `replay` both fold events with
// Apply, so the stored records and a replay of the log cannot disagree
// unless something outside fencectl changed the journal.
//
// # Only the token authorises
//
// A token names one claim. Every mutation of a claimed task shows it and is
// checked inside the same journal write transaction that makes the change, so
// an agent whose lease was reaped, revoked or taken over is refused and
// nothing changes. Agent names are labels: recorded, shown, never compared.
//
// # Journal first, then the tree
//
// The journal commits first; the file moves follow. A crash in between
// leaves the tree one commit behind, and the next writer finishes the moves
// of the last commit before doing anything else (settle.go). `Replay` is the
// full repair.
//
// # Where things are
//
//   - the pure rules: rules.go (transitions, authorisation, expiry),
//     state.go and types.go (the words), errors.go (the typed refusals);
//   - the Tree and its operations: tree.go (Open, Options), init.go,
//     ops.go (add, claim, the fenced calls, reap, revoke, requeue),
//     query.go (status, show, list, log), request.go (claim request ids);
//   - the write path: groupcommit.go (one transaction, one commit and one
//     set of directory syncs for many callers; Together for one caller's
//     several operations), adopt.go (inbox/ first);
//   - repair: settle.go (finish the last commit's moves), replay.go (the
//     full check and repair), recover.go (rebuild a lost journal), and
//     scan.go (the directory listing both of those read); compact.go
//     (fold finished tasks' events into kept records, reclaim the space);
//   - the lease keeper: keeper.go, and keeperwatch.go (one journal watch
//     shared by a Tree's keepers);
//   - the clock: clock.go (Options.Clock, injected; nothing reads the
//     environment); hooks.go and hooks_fencetest.go hold the crash points
//     that only test builds have.
package fence

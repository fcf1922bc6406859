// Package bolt is the default journal store: one bbolt database in
// .fence/journal.db that holds every task record, the indexes that make
// claims cheap, the token counter and the append-only event log. It
// implements the port of package journal (Backend, Store, Tx) and adds what
// only a file needs: the flock on .fence/lock, parking a handle between
// groups, creation by rename, salvage of a damaged file, inotify.
//
// # Buckets
//
//   - meta: schema version, tree id, defaults, the token counter, per-state
//     counts and the range of events written by the last commit.
//   - tasks: id → Task record (JSON).
//   - ready: (descending priority, creation seq) → id, for every available
//     task, so claim-next reads the first key: O(log n).
//   - expiry: (deadline, token) → id, for every claimed task, so reaping costs
//     O(expired), not O(tasks).
//   - claims: token → Claim, one per token ever issued, so a stale token can be
//     explained (who lost it, when, how) long after the task moved on.
//   - events: big-endian seq → Event (JSON), append-only.
//
// # Locking
//
// bbolt's own file lock polls every 50 ms. Every process therefore takes a
// blocking flock on .fence/lock first (exclusive for writers, shared for
// readers) and only then opens bbolt, so bbolt's lock never contends. The
// wait is bounded; when it runs out the caller gets ErrBusy.
//
// # Tokens
//
// A fencing token is a uint64 strictly above every token the journal has
// issued. The counter starts at the creation time in microseconds and every
// claim takes max(counter+1, now in µs), below a ceiling kept outside
// journal.db (ceiling.go), so a journal rebuilt after a loss starts above
// any token an older journal handed out, even with the clock behind.
//
// # Damage
//
// bbolt reads pages through mmap and panics on some corruption. Every
// transaction runs with debug.SetPanicOnFault and a recover that turns a
// panic or a memory fault into a *CorruptError naming the file, so no stack
// trace reaches a user.
package bolt

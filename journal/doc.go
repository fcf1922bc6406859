// Package journal is the storage port of fencectl's source of truth: the
// interfaces every store implements (Backend, TreeLock, Store, Tx), the
// binary codec the records of package journal/record are stored in, the
// token ceiling's files and the errors shared by every backend. It imports
// no backend: the bbolt store is package journal/bolt, and the contract a
// store must meet is package journal/journaltest.
//
// # Transactions
//
// Every state change is one Store.Update: the events it appends and the
// records it puts commit together or not at all. A store may run the
// function of an Update more than once (an optimistic store retries on a
// conflict), so the function starts afresh on every run.
//
// # Writers
//
// fence assumes no process-wide lock. A store that lets one writer in at a
// time (bbolt, through a flock) says so with Store.Exclusive; fence's
// crash finish ("only the last commit can be unfinished") relies on it.
//
// # Making and rebuilding
//
// init and recover make a journal, set a damaged one aside and salvage
// its tokens only through Backend.LockTree: the held TreeLock keeps other
// creators out, so each backend decides how a journal is built safely.
//
// # Time
//
// Lease expiry is judged by the store's clock, Tx.Now: the local clock for
// bbolt, the cluster's for a store that has one.
//
// # Tokens
//
// A fencing token is a uint64 strictly above every token the journal has
// issued, kept below a ceiling recorded outside the store (ceiling.go), so a
// journal rebuilt after a loss starts above any token an older one handed
// out, even with the clock behind.
package journal

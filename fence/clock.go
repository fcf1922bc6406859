package fence

import "time"

// The clock. Every decision that depends on the time (a lease's deadline,
// whether it has expired, an event's time, when the keeper heartbeats, the
// floor of a new journal's tokens) reads the clock of the Tree, or of the
// Options given to InitTree and Recover: Options.Clock, or the system
// clock. Tests inject a clock they can move; nothing reads the environment.

// systemClock is the clock when Options names none. UTC, so that no
// process spends time loading the local zone to format it.
func systemClock() time.Time { return time.Now().UTC() }

// clock returns o's clock, the system clock if it names none.
func (o Options) clock() func() time.Time {
	if o.Clock != nil {
		return o.Clock
	}
	return systemClock
}

// lockTimeout is o.Timeout with 0 meaning DefaultTimeout; a negative value
// (NoWait) tries the lock once.
func (o Options) lockTimeout() time.Duration {
	if o.Timeout == 0 {
		return DefaultTimeout
	}
	return o.Timeout
}

// now reads the tree's clock.
func (t *Tree) now() time.Time { return t.opts.Clock() }

// Now is the tree's time: on a bbolt tree the lease clock (wall time at
// boot plus the time since), which wall-clock jumps do not move; what
// callers should show a lease's time left against.
func (t *Tree) Now() time.Time { return t.now() }

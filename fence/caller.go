package fence

import (
	"context"
	"fmt"
)

type callerKey struct{}

// WithCaller marks ctx as the context of a step made for a caller that
// may go away without ctx knowing at once (a daemon's client, over a
// socket): the step's group asks gone, under the lock, right before it
// makes anything, and does not make the step of a caller that has gone.
// A daemon stopped (SIGSTOP, a frozen cgroup) while a step waited, whose
// client gave up meanwhile, must not make that step when it runs again:
// a claim whose token nobody gets.
func WithCaller(ctx context.Context, gone func() bool) context.Context {
	return context.WithValue(ctx, callerKey{}, gone)
}

// errCallerGone is the outcome of a step whose caller had gone before
// its group ran it: nothing was made.
var errCallerGone = fmt.Errorf("%w: the caller has gone; nothing was made", context.Canceled)

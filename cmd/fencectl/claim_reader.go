package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/urfave/cli/v2"
)

// A claim is only worth making for someone who will read its token. An
// agent's harness that gave up (killed its shell, closed the pipe of
// `x=$(fencectl claim --wait 1h)`) leaves the claim waiting for nobody:
// once a task comes, it was claimed, the claim died of SIGPIPE printing
// its token, and the task sat claimed for the whole TTL, then was reaped
// as a failed attempt. So a claim whose stdout has no reader claims
// nothing, and one waiting stops waiting when its reader leaves.

// readerPoll is how often a waiting claim looks at its stdout's reader.
const readerPoll = 200 * time.Millisecond

// readerGoneError ends a claim whose stdout lost its reader: nothing was
// claimed.
type readerGoneError struct{}

func (readerGoneError) Error() string {
	return "stdout has no reader (broken pipe): whoever was to read the claim has gone, so nothing was claimed"
}

// guardReader returns ctx, cancelled if out's stdout loses its reader
// while wait lasts, and gone, which says whether that happened (or had
// happened before: then no claim is to be made at all). Call stop when
// the claim has returned.
func guardReader(ctx context.Context, out *output, wait time.Duration) (_ context.Context, gone func() bool, stop func()) {
	f, ok := out.stdoutFile()
	if !ok { // a daemon's client: the daemon cancels a step whose client left
		return ctx, func() bool { return false }, func() {}
	}
	if noReader(f) {
		return ctx, func() bool { return true }, func() {}
	}
	if wait <= 0 {
		return ctx, func() bool { return false }, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	unwatch := watchReader(f, func() { cancel(readerGoneError{}) })
	gone = func() bool { _, is := context.Cause(ctx).(readerGoneError); return is }
	return ctx, gone, func() { unwatch(); cancel(nil) }
}

// watchReader calls onGone, once, if f loses its reader before the
// returned stop is called; it looks every readerPoll.
func watchReader(f *os.File, onGone func()) (stop func()) {
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(readerPoll)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if noReader(f) {
					onGone()
					return
				}
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done) }) }
}

// claimWithReader runs claim under guardReader: a claim for nobody is not
// made, and a waiting one ends when its reader leaves.
func claimWithReader(ctx context.Context, out *output, wait time.Duration, claim func(context.Context) error) error {
	ctx, gone, stop := guardReader(ctx, out, wait)
	defer stop()
	if gone() {
		return readerGoneError{}
	}
	err := claim(ctx)
	if err != nil && gone() {
		return fmt.Errorf("%w (stopped waiting)", readerGoneError{})
	}
	return err
}

// watchReaderWhileWaiting closes conn, a waiting claim's connection to the
// daemon, if out's stdout loses its reader before the answer comes; left
// says whether it did, and ends the watch.
func watchReaderWhileWaiting(c *cli.Context, out *output, conn io.Closer) (left func() bool) {
	f, ok := out.stdoutFile()
	if !ok || c.Command.Name != "claim" || c.Duration("wait") <= 0 {
		return func() bool { return false }
	}
	var gone atomic.Bool
	stop := watchReader(f, func() {
		gone.Store(true)
		_ = conn.Close()
	})
	return func() bool {
		stop()
		return gone.Load()
	}
}

package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fencectl/fencectl/fence"
)

// Watching from the terminal (log --follow, status --watch): wait for the
// journal to change, woken by the store's watch (inotify on a bbolt
// journal, an etcd watch on etcd), never by a sleep loop. SIGINT or
// SIGTERM ends the watch with exit 0.

// watchFallback is how often a watcher re-reads the journal when it
// cannot watch it (no inotify instance left); it says so once.
const watchFallback = 2 * time.Second

// watchLoop calls fn once, then after every change of the journal, until
// ctx ends or a signal comes (then it returns nil) or fn fails. tick, if
// not zero, also calls redraw that often (a countdown on a terminal: no
// read of the journal).
func watchLoop(ctx context.Context, t *fence.Tree, out *output, fn func(context.Context) error, tick time.Duration, redraw func()) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var changed <-chan struct{}
	var poll <-chan time.Time
	// The watch is set up before the first read, so that nothing
	// committed after the read is missed.
	if ch, err := t.Watch(); err != nil {
		fmt.Fprintf(out.stderr, "fencectl: warning: %v; re-reading the journal every %s instead\n", err, watchFallback)
		p := time.NewTicker(watchFallback)
		defer p.Stop()
		poll = p.C
	} else {
		defer ch.Close()
		changed = ch.C()
	}
	var redrawC <-chan time.Time
	if tick > 0 {
		r := time.NewTicker(tick)
		defer r.Stop()
		redrawC = r.C
	}
	if err := fn(ctx); err != nil {
		return ignoreCancel(ctx, err)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-poll:
		case <-redrawC:
			redraw()
			continue
		}
		if err := fn(ctx); err != nil {
			return ignoreCancel(ctx, err)
		}
	}
}

// ignoreCancel drops the error a read returns because the watch was
// ended by a signal.
func ignoreCancel(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// isTerminal reports whether w is a terminal (status --watch redraws in
// place only there).
func isTerminal(w any) bool {
	f, ok := fileOf(w)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

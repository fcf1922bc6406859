package daemonlink

import (
	"math"
	"testing"
	"time"
)

func TestAnswerWithin(t *testing.T) {
	for _, c := range []struct {
		timeout, wait, want time.Duration
	}{
		{0, 0, 60 * time.Second},                     // the default timeout
		{-1, 0, 60 * time.Second},                    // NoWait: the default bound
		{time.Second, 0, 33 * time.Second},           // 3 × 1 s + 30 s
		{time.Second, time.Minute, 93 * time.Second}, // a claim's --wait on top
		// A huge --timeout saturates instead of wrapping round to a
		// deadline in the past (which gave up on every step at once).
		{999999 * time.Hour, 0, math.MaxInt64},
		{time.Duration(math.MaxInt64), time.Duration(math.MaxInt64), math.MaxInt64},
		{time.Hour, time.Duration(math.MaxInt64), math.MaxInt64},
	} {
		if got := AnswerWithin(c.timeout, c.wait); got != c.want {
			t.Errorf("AnswerWithin(%s, %s) = %s, want %s", c.timeout, c.wait, got, c.want)
		}
	}
}

func TestHelloWithin(t *testing.T) {
	for _, c := range []struct{ timeout, want time.Duration }{
		{10 * time.Second, Wait},
		{time.Second, time.Second}, // a shorter --timeout bounds the wait for a stopped daemon
		{0, minHello},              // try once: still long enough for a daemon that answers at all
		{-1, minHello},
	} {
		if got := HelloWithin(c.timeout); got != c.want {
			t.Errorf("HelloWithin(%s) = %s, want %s", c.timeout, got, c.want)
		}
	}
}

package etcd

import (
	"math/rand/v2"
)

// Spreading claims that lost a race. Claims by many clients all read the
// ready index from its start and take its first task; all but one lose
// the race for it, and in the run again they meet at the next one. Once a
// run of Update has lost on more than the head (spread > 0), Ready starts
// at a random one of the first page's tasks of the top priority and goes
// round, then on down the index: the losers take different tasks.
//
// What a spread claim gives up is only an order between claims that ran
// at the same time; a claim that never lost a race takes the first ready
// task, and a lower priority is never taken before a higher one that the
// snapshot shows. Each candidate's ready key is checked at commit on its
// own, not the range before it: a claim of the third task does not
// conflict with a claim of the first.

// readySpread visits the first ready page's top-priority tasks from a
// random one round, as Ready's first candidates, and reports whether fn
// stopped. visited gets the ids it handed out.
func (t *Tx) readySpread(fn func(id string) bool, visited map[string]bool) (stopped bool) {
	first := t.firstReadyPageKey()
	r, err := t.page(first.from, first.hi, first.limit)
	if err != nil || len(r.Kvs) < 2 {
		return false
	}
	p := len(t.key(famReady, ""))
	top := 0
	for _, kv := range r.Kvs {
		if len(kv.Key) < p+8 || string(kv.Key[p:p+8]) != string(r.Kvs[0].Key[p:p+8]) {
			break
		}
		top++
	}
	start := rand.IntN(top)
	for i := range top {
		kv := r.Kvs[(start+i)%top]
		k := string(kv.Key)
		if _, mine := t.buf[k]; mine {
			continue // this transaction moved it: the scan sees how
		}
		t.track(k, kv)
		id := string(kv.Value)
		visited[id] = true
		if !fn(id) {
			return true
		}
	}
	return false
}

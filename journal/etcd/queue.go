package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// The writers' queue: a writer that keeps losing races (Store.Update)
// takes a turn, first come, first served, and commits alone.
//
// A turn is a key under P/w/ on the session's lease (a writer that dies
// lets go when the lease runs out), and it is the writer's once every key
// made before it is gone. Every optimistic commit checks that the queue
// is empty, so a holder loses at most one more race, to a commit already
// in flight; and so, once anyone queues, everyone who races meanwhile
// loses too and queues after a few losses. At 16 contending clients the
// queue, once entered, stays full: every commit is a turn. So a turn costs
// as few round trips as it can:
//
//   - joining is one request: the key is made and the queue listed in
//     one transaction;
//   - the wait is one watch of the queue from that revision: the writer
//     knows which keys are ahead of it and counts their deletions, with
//     no read after each;
//   - the turn is given up by the commit made with it (which deletes its
//     key and compares that it still exists): the next writer's watch
//     hears of it as the commit lands, with no write of its own.
//
// etcd's concurrency.Mutex, used before, read the queue again after
// every deletion, read its own key once more at the end, and gave the
// turn up in a write of its own: measured at 16 clients, a run that
// filled the queue made 36 to 46 claims/s against 65 to 95 for one that
// did not (make bench landed in the slow one: 43).
//
// The queue orders writers; it never decides a commit. A writer whose
// lease ran out while it waited or held the turn still commits only if
// nothing it read has changed; its commit compares the key too, fails,
// and it joins the queue again.

// writerTurn is one writer's place in the queue.
type writerTurn struct {
	b        *Backend
	sess     *concurrency.Session
	key      string
	rev      int64 // the key's create revision: its place in the queue
	released bool  // the key is deleted (by the commit made with the turn)
	gone     bool  // a failed commit found the key gone (its lease ran out)
}

// turns numbers the keys of a process: one session can queue several
// writers at once (several Trees on one backend).
var turns atomic.Uint64

// errTurnLost says the writer's own key went while it waited: its lease
// ran out.
var errTurnLost = errors.New("etcd: the writer's place in the queue was lost (its lease ran out)")

// joinQueue makes this writer's key in the queue and waits until every
// key ahead of it is gone.
func (b *Backend) joinQueue(ctx context.Context) (*writerTurn, error) {
	sess, err := b.session(ctx)
	if err != nil {
		return nil, err
	}
	pfx := b.cfg.Prefix + keyWriters + "/"
	w := &writerTurn{b: b, sess: sess, key: fmt.Sprintf("%s%x-%d", pfx, sess.Lease(), turns.Add(1))}
	resp, err := b.cli.Txn(ctx).Then(
		clientv3.OpPut(w.key, "", clientv3.WithLease(sess.Lease())),
		clientv3.OpGet(pfx, clientv3.WithPrefix(), clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		return nil, err
	}
	w.rev = resp.Header.Revision
	ahead := map[string]bool{}
	for _, kv := range resp.Responses[1].GetResponseRange().GetKvs() {
		if kv.CreateRevision < w.rev {
			ahead[string(kv.Key)] = true
		}
	}
	if err := w.waitFor(ctx, ahead, w.rev); err != nil {
		w.release()
		return nil, err
	}
	return w, nil
}

// waitFor watches the queue from revision rev on until every key of
// ahead is deleted.
func (w *writerTurn) waitFor(ctx context.Context, ahead map[string]bool, rev int64) error {
	if len(ahead) == 0 {
		return nil
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	pfx := w.b.cfg.Prefix + keyWriters + "/"
	for resp := range w.b.cli.Watch(wctx, pfx, clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithFilterPut()) {
		if resp.CompactRevision != 0 {
			// The watch began below what etcd keeps: list the queue as
			// it is now.
			return w.relist(ctx)
		}
		if err := resp.Err(); err != nil {
			return err
		}
		for _, ev := range resp.Events {
			if ev.Type != mvccpb.DELETE {
				continue
			}
			k := string(ev.Kv.Key)
			if k == w.key {
				return errTurnLost
			}
			delete(ahead, k)
		}
		if len(ahead) == 0 {
			return nil
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.New("etcd: the watch of the writers' queue ended")
}

// relist reads the queue afresh and waits for what is ahead of the
// writer in it.
func (w *writerTurn) relist(ctx context.Context) error {
	pfx := w.b.cfg.Prefix + keyWriters + "/"
	resp, err := w.b.cli.Get(ctx, pfx, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return err
	}
	ahead := map[string]bool{}
	mine := false
	for _, kv := range resp.Kvs {
		switch {
		case string(kv.Key) == w.key:
			mine = true
		case kv.CreateRevision < w.rev:
			ahead[string(kv.Key)] = true
		}
	}
	if !mine {
		return errTurnLost
	}
	return w.waitFor(ctx, ahead, resp.Header.Revision)
}

// holds is the compare that the writer still holds its turn.
func (w *writerTurn) holds() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(w.key), "=", w.rev)
}

// giveUp is the operation that gives the turn up, in the commit made
// with it.
func (w *writerTurn) giveUp() clientv3.Op { return clientv3.OpDelete(w.key) }

// check reads the turn's key, in the Else of a commit made with it.
func (w *writerTurn) check() clientv3.Op { return clientv3.OpGet(w.key, clientv3.WithKeysOnly()) }

// goneIn reports whether the Else of a failed commit found the turn's key
// gone (check's answer, the second).
func (w *writerTurn) goneIn(resp *clientv3.TxnResponse) bool {
	if len(resp.Responses) < 2 {
		return false
	}
	kvs := resp.Responses[1].GetResponseRange().GetKvs()
	w.gone = w.gone || len(kvs) == 0 || kvs[0].CreateRevision != w.rev
	return w.gone
}

// lost reports whether the turn is gone: its key, or its session.
func (w *writerTurn) lost() bool {
	if w.gone {
		return true
	}
	select {
	case <-w.sess.Done():
		return true
	default:
		return false
	}
}

// release gives the turn up, unless its commit did.
func (w *writerTurn) release() {
	if w.released {
		return
	}
	w.released = true
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = w.b.cli.Delete(c, w.key)
}

// session returns the backend's session for the queue, made on first
// need and again once its lease is lost.
func (b *Backend) session(ctx context.Context) (*concurrency.Session, error) {
	b.sessMu.Lock()
	defer b.sessMu.Unlock()
	if b.sess != nil {
		select {
		case <-b.sess.Done(): // its lease was lost: make another
			b.sess = nil
		default:
		}
	}
	if b.sess == nil {
		sess, err := newSession(ctx, b.cli, writeLockTTL)
		if err != nil {
			return nil, err
		}
		b.sess = sess
	}
	return b.sess, nil
}

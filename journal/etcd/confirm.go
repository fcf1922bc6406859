package etcd

import (
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Confirm returns nil if no key this run read outside the meta family
// has changed since it read it; otherwise it spoils the run, so that
// Update runs it again on a fresh snapshot. It costs one request, made
// only where fence compares a snapshot with the file system (a task file
// out of place): writers here do not take turns, so a snapshot can be
// older than the directory it is compared with, and a decision taken on
// both (a file "missing" that another host's newer commit just moved, a
// file moved back to where an old snapshot says it belongs) would mix
// two moments. The head is left out: every commit by anyone moves it, and
// it says nothing about one task.
func (t *Tx) Confirm() error {
	if t.err != nil || !t.write {
		return t.err
	}
	meta := t.key(famMeta, "")
	cmps := make([]clientv3.Cmp, 0, len(t.reads))
	for k, rev := range t.reads {
		if !strings.HasPrefix(k, meta) {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", rev))
		}
	}
	if len(cmps) == 0 {
		return nil
	}
	t.requests++
	resp, err := t.s.b.cli.Txn(t.ctx).If(cmps...).Commit()
	if err != nil {
		return t.fail(err)
	}
	if !resp.Succeeded {
		t.s.dropCache()
		return t.fail(errConflict)
	}
	return nil
}

package etcd

import (
	"errors"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/fencectl/fencectl/journal"
)

// etcd's transient refusals, met when a leader dies mid-call, are busy
// (retry), not unexpected errors; a refusal that is not transient stays
// what it is.
func TestUnreachable_TransientEtcdErrors(t *testing.T) {
	b := &Backend{cfg: journal.Config{Backend: "etcd", Endpoints: []string{"127.0.0.1:2379"}, Prefix: "/p"}}
	for _, err := range []error{rpctypes.ErrLeaderChanged, rpctypes.ErrNoLeader, rpctypes.ErrTimeout} {
		if got := b.unreachable(err); !errors.Is(got, journal.ErrBusy) {
			t.Errorf("unreachable(%v) = %v, want busy", err, got)
		}
	}
	if got := b.unreachable(rpctypes.ErrTooManyOps); errors.Is(got, journal.ErrBusy) {
		t.Errorf("unreachable(%v) = %v: not a transient refusal", rpctypes.ErrTooManyOps, got)
	}
}

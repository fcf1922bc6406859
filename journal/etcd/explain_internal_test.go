package etcd

import (
	"fmt"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/fencectl/fencectl/journal"
)

// etcd's bare refusals get what to do about them, the original error kept
// in the chain.
func TestExplain_SaysWhatToDo(t *testing.T) {
	b := &Backend{cfg: journal.Config{Endpoints: []string{"10.0.0.1:2379"}, Prefix: "/tree"}}
	for _, c := range []struct {
		err  error
		want string
	}{
		{rpctypes.ErrUserEmpty, "set FENCE_ETCD_USERNAME and FENCE_ETCD_PASSWORD"},
		{fmt.Errorf("commit: %w", rpctypes.ErrAuthFailed), "set FENCE_ETCD_USERNAME and FENCE_ETCD_PASSWORD"},
		{rpctypes.ErrPermissionDenied, "read and write access to the keys under /tree"},
		{rpctypes.ErrNoSpace, "out of its space quota: nothing was changed"},
	} {
		got := b.explain(c.err)
		if !strings.Contains(got.Error(), c.want) || !strings.Contains(got.Error(), "10.0.0.1:2379") || !strings.Contains(got.Error(), c.err.Error()) {
			t.Errorf("explain(%v) = %q, want it to say %q at the endpoint", c.err, got, c.want)
		}
	}
	if other := fmt.Errorf("something else"); b.explain(other) != other {
		t.Errorf("explain changed an error it has nothing to say of")
	}
}

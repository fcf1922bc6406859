package etcd

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencectl/fencectl/journal/etcd/etcdtest"

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

// A wrong password against a real etcd with auth on: the refusal comes
// when the client connects, and it too says where the credentials come
// from and which etcd refused them. It used to be etcd's bare
// "authentication failed" (found from outside).
func TestExplain_WrongPasswordAtConnect(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, step := range []func() error{
		func() error { _, err := cli.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := cli.RoleAdd(ctx, "root"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	cli.Close()
	t.Setenv("FENCE_ETCD_USERNAME", "root")
	t.Setenv("FENCE_ETCD_PASSWORD", "wrong")
	b, err := New(journal.Config{Backend: "etcd", Endpoints: c.Endpoints(), Prefix: "/tree"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	_, err = b.Exists(t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "FENCE_ETCD_PASSWORD") || !strings.Contains(err.Error(), c.Endpoints()[0]) {
		t.Fatalf("Exists with a wrong password: %v; want etcd's refusal, the endpoint and the variables", err)
	}
	if strings.Contains(err.Error(), "wrong") {
		t.Errorf("the error shows the password: %v", err)
	}
}

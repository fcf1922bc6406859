package etcd

import (
	"errors"
	"net"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"

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

// An endpoint that speaks gRPC but is no etcd (a proxy, another service
// on the port) is as good as no etcd there: exit 5 naming the endpoint,
// not a bare gRPC "Unimplemented" (found from outside).
func TestUnreachable_NotAnEtcdServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer() // no service: every call is Unimplemented
	go srv.Serve(l)
	defer srv.Stop()
	b, err := New(journal.Config{Backend: "etcd", Endpoints: []string{l.Addr().String()}, Prefix: "/tree"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	_, err = b.Exists(t.TempDir())
	var u *journal.UnreachableError
	if !errors.As(err, &u) || !errors.Is(err, journal.ErrBusy) || !strings.Contains(err.Error(), l.Addr().String()) || !strings.Contains(err.Error(), "is it an etcd server") {
		t.Fatalf("Exists against a gRPC server that is no etcd: %v; want an UnreachableError naming the endpoint", err)
	}
}

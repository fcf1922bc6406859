package clitest

import (
	"strings"
	"testing"

	"github.com/fencectl/fencectl/journal/etcd/etcdtest"
)

// Etcd starts a one-member etcd inside the test process for t (stopped at
// t's cleanup) and returns its endpoints as `--journal` takes them.
func Etcd(t testing.TB) string {
	t.Helper()
	return strings.Join(etcdtest.Start(t, 1).Endpoints(), ",")
}

package journaltest_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencectl/fencectl/journal"
	etcdstore "github.com/fencectl/fencectl/journal/etcd"
	"github.com/fencectl/fencectl/journal/journaltest"
)

// externalEtcd is the etcd server binary of Debian's etcd-server package
// (3.4.23 on the machines CI uses): the oldest server fencectl supports.
const externalEtcd = "/usr/bin/etcd"

// The whole contract against an etcd server started as a separate process
// (etcd 3.4), not the embedded one of the client's version: fencectl uses
// no API that 3.4 lacks.
func TestContractExternalEtcd(t *testing.T) {
	if _, err := os.Stat(externalEtcd); err != nil {
		t.Skipf("%s not installed (Debian package etcd-server): %v", externalEtcd, err)
	}
	endpoint := startExternalEtcd(t)
	n := 0
	newBackend := func(t *testing.T) (journal.Backend, string) {
		n++
		b, err := etcdstore.New(journal.Config{Backend: "etcd", Endpoints: []string{endpoint}, Prefix: fmt.Sprintf("/ext-%d", n)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b, newMetaDir(t)
	}
	newStore := func(t *testing.T) journal.Store {
		b, dir := newBackend(t)
		return createEtcd(t, b, dir)
	}
	t.Run("Store", func(t *testing.T) { journaltest.Run(t, newStore) })
	t.Run("Backend", func(t *testing.T) { journaltest.RunBackend(t, newBackend) })
}

// startExternalEtcd runs /usr/bin/etcd on loopback ports with a temporary
// data dir and fast ticks, stopped at cleanup, and returns its client
// address once it answers.
func startExternalEtcd(t *testing.T) string {
	t.Helper()
	var addrs []string
	for range 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, l.Addr().String())
		l.Close()
	}
	client, peer := "http://"+addrs[0], "http://"+addrs[1]
	dir := t.TempDir()
	cmd := exec.Command(externalEtcd,
		"--name", "ext", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "ext="+peer,
		"--heartbeat-interval", "10", "--election-timeout", "100",
		"--logger", "zap", "--log-outputs", "stderr")
	logf, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addrs[0]}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := cli.Status(ctx, addrs[0])
		cancel()
		if err == nil {
			t.Logf("etcd %s at %s", st.Version, addrs[0])
			return addrs[0]
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "etcd.log"))
			t.Fatalf("%s did not answer within 30s: %v\n%s", externalEtcd, err, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Package etcdtest starts real etcd servers inside a test process (etcd's
// own embed package: no binary to install), one member or a cluster, on
// loopback ports, with fast ticks so that elections and lease expiry take
// a fraction of a second. Members can be stopped and started again from
// their data directories, for fault tests. Options set what operators
// set on a real server and fencectl must live with, such as a lower
// --max-txn-ops.
package etcdtest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// Cluster is a running etcd cluster.
type Cluster struct {
	dir     string
	opts    Options
	members []*Member
}

// Options are server flags a test sets; the zero value is etcd's defaults.
type Options struct {
	// MaxTxnOps is --max-txn-ops: the most compares, or writes, one
	// transaction may hold (0: etcd's default, 128).
	MaxTxnOps uint
}

// Member is one etcd server of a Cluster.
type Member struct {
	Name      string
	ClientURL string // host:port
	peerURL   string
	dir       string
	cluster   *Cluster
	mu        sync.Mutex
	etcd      *embed.Etcd
}

// Start starts a cluster of n members for t, stopped at its cleanup.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	return StartWith(t, n, Options{})
}

// StartWith is Start with server options.
func StartWith(t testing.TB, n int, o Options) *Cluster {
	t.Helper()
	c, err := StartInWith(t.TempDir(), n, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// StartIn starts a cluster of n members with its data under dir.
func StartIn(dir string, n int) (*Cluster, error) {
	return StartInWith(dir, n, Options{})
}

// StartInWith is StartIn with server options.
func StartInWith(dir string, n int, o Options) (*Cluster, error) {
	c := &Cluster{dir: dir, opts: o}
	for i := range n {
		client, peer, err := freePorts()
		if err != nil {
			return nil, err
		}
		c.members = append(c.members, &Member{Name: fmt.Sprintf("m%d", i), ClientURL: client, peerURL: peer, dir: filepath.Join(dir, fmt.Sprintf("m%d", i)), cluster: c})
	}
	errs := make(chan error, n)
	for _, m := range c.members {
		go func() { errs <- m.Start() }()
	}
	for range n {
		if err := <-errs; err != nil {
			c.Stop()
			return nil, err
		}
	}
	return c, nil
}

// Endpoints returns every member's client address.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, m := range c.members {
		out = append(out, m.ClientURL)
	}
	return out
}

// Members returns the members.
func (c *Cluster) Members() []*Member { return c.members }

// Leader returns the member that leads, or nil.
func (c *Cluster) Leader() *Member {
	for _, m := range c.members {
		m.mu.Lock()
		e := m.etcd
		m.mu.Unlock()
		if e != nil && e.Server.Leader() == e.Server.MemberID() {
			return m
		}
	}
	return nil
}

// Stop stops every member.
func (c *Cluster) Stop() {
	for _, m := range c.members {
		m.Stop()
	}
}

// Start starts the member (again, from its data directory).
func (m *Member) Start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.etcd != nil {
		return nil
	}
	cfg := embed.NewConfig()
	cfg.Name = m.Name
	cfg.Dir = m.dir
	cfg.TickMs, cfg.ElectionMs = 10, 100
	if m.cluster.opts.MaxTxnOps != 0 {
		cfg.MaxTxnOps = m.cluster.opts.MaxTxnOps
	}
	cfg.Logger, cfg.LogLevel = "zap", "error"
	cfg.LogOutputs = []string{filepath.Join(m.cluster.dir, m.Name+".log")}
	lc, _ := url.Parse("http://" + m.ClientURL)
	lp, _ := url.Parse("http://" + m.peerURL)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*lc}, []url.URL{*lc}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*lp}, []url.URL{*lp}
	var initial []string
	for _, o := range m.cluster.members {
		initial = append(initial, o.Name+"=http://"+o.peerURL)
	}
	cfg.InitialCluster = strings.Join(initial, ",")
	cfg.InitialClusterToken = "fencectl-test"
	if _, err := os.Stat(filepath.Join(m.dir, "member")); err == nil {
		cfg.ClusterState = embed.ClusterStateFlagExisting
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("start etcd member %s: %w", m.Name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		return fmt.Errorf("etcd member %s did not become ready in 30s", m.Name)
	}
	m.etcd = e
	return nil
}

// Stop stops the member; its data stays for Start.
func (m *Member) Stop() {
	m.mu.Lock()
	e := m.etcd
	m.etcd = nil
	m.mu.Unlock()
	if e != nil {
		e.Close()
	}
}

// freePorts returns two loopback addresses with ports free right now,
// below the kernel's ephemeral range. A port the kernel handed out for
// :0 is one it also hands out as the local end of outgoing connections:
// between this check and etcd's bind (or a member's restart on the same
// port), any process's connection could take it ("bind: address already
// in use", seen under make test's parallel packages). Below the range,
// only another listener picking at random could, and each is checked.
func freePorts() (string, string, error) {
	low := ephemeralLow()
	var addrs []string
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for tries := 0; len(addrs) < 2; tries++ {
		addr := "127.0.0.1:0"
		if low > minPort+1000 && tries < 100 {
			addr = fmt.Sprintf("127.0.0.1:%d", minPort+rand.IntN(low-minPort))
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			if tries < 100 {
				continue
			}
			return "", "", err
		}
		ls = append(ls, l)
		addrs = append(addrs, l.Addr().String())
	}
	return addrs[0], addrs[1], nil
}

// minPort is the lowest port freePorts picks: above the well-known and
// most registered services' ports.
const minPort = 20000

// ephemeralLow is the first port of the kernel's ephemeral range (0 if
// unknown: freePorts then asks for :0).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return 0
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return n
}

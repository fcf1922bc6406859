package etcd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

func init() {
	journal.Register("etcd", func(c journal.Config) (journal.Backend, error) { return New(c) })
}

// DefaultTimeout bounds a store's calls when OpenOptions give none.
const DefaultTimeout = 10 * time.Second

// Backend is the etcd store of one tree's journal. It holds one client,
// made on first use and shared by every handle it opens.
type Backend struct {
	cfg     journal.Config
	timeout time.Duration // bounds Exists and LockTree's default; see SetTimeout
	once    sync.Once
	cli     *clientv3.Client
	cliErr  error
	sessMu  sync.Mutex
	sess    *concurrency.Session // for the writers' queue, made on first need
	poolMu  sync.Mutex
	pool    map[int64]pooled // by TTL: the lease new claims get (leases.go)
	// metaMu guards seenMeta: the meta keys as Exists last found them,
	// for the next Open to take instead of reading them again (openMeta),
	// and treeID: the tree id a journal opened here must have (the
	// config's, then that of the journal Create made; "" checks nothing).
	metaMu   sync.Mutex
	seenMeta *metaKeys
	treeID   string
	// metaReads counts the reads of the meta keys Exists and Open sent
	// (for tests).
	metaReads atomic.Int64
	// seenCounter is the highest token counter any handle of this
	// backend saw committed, or read as the ceiling's witness: a snapshot
	// below it is of a journal that lost tokens it issued (witness.go).
	seenCounter atomic.Uint64
}

var _ journal.Backend = (*Backend)(nil)

// New returns the backend that c names (c.Backend "etcd"). It connects on
// first use.
func New(c journal.Config) (*Backend, error) {
	if c.Backend != "etcd" || len(c.Endpoints) == 0 || c.Prefix == "" {
		return nil, fmt.Errorf("not an etcd journal config: %+v", c)
	}
	return &Backend{cfg: c, treeID: c.TreeID}, nil
}

// SetTimeout bounds the calls that take no timeout of their own (Exists),
// so that a command's --timeout holds from its first call to etcd.
func (b *Backend) SetTimeout(d time.Duration) { b.timeout = timeoutOf(d) }

func (b *Backend) callTimeout() time.Duration {
	if b.timeout > 0 {
		return b.timeout
	}
	return DefaultTimeout
}

// Config returns the journal config the backend was made from.
func (b *Backend) Config() journal.Config { return b.cfg }

// tlsFile is a TLS file and who named it: a FENCE_ETCD_* variable (which
// wins) or the tree's config ("").
type tlsFile struct{ path, source string }

// tlsFiles are the TLS files: init's flags, else the environment's
// FENCE_ETCD_*, else the tree's config.
func (b *Backend) tlsFiles() (ca, cert, key tlsFile) {
	pick := func(env, flag, conf string) tlsFile {
		if b.cfg.TLSFromFlags && conf != "" {
			return tlsFile{conf, flag + " or " + env}
		}
		if v := os.Getenv(env); v != "" {
			return tlsFile{v, env}
		}
		return tlsFile{conf, ""}
	}
	return pick("FENCE_ETCD_CACERT", "--etcd-cacert", b.cfg.CACert), pick("FENCE_ETCD_CERT", "--etcd-cert", b.cfg.Cert), pick("FENCE_ETCD_KEY", "--etcd-key", b.cfg.Key)
}

// connect makes the client. Credentials come from FENCE_ETCD_USERNAME and
// FENCE_ETCD_PASSWORD only: nothing secret is ever written to disk.
func (b *Backend) connect() (*clientv3.Client, error) {
	b.once.Do(func() {
		cc := clientv3.Config{
			Endpoints:            b.cfg.Endpoints,
			DialTimeout:          5 * time.Second,
			DialKeepAliveTime:    10 * time.Second,
			DialKeepAliveTimeout: 5 * time.Second,
			Username:             os.Getenv("FENCE_ETCD_USERNAME"),
			Password:             os.Getenv("FENCE_ETCD_PASSWORD"),
			Logger:               zap.NewNop(),
			AutoSyncInterval:     0,
		}
		ca, cert, key := b.tlsFiles()
		// A key alone is a mistake to say, not plain HTTP to go on with.
		if ca.path != "" || cert.path != "" || key.path != "" {
			t, err := tlsConfig(ca, cert, key)
			if err != nil {
				b.cliErr = err
				return
			}
			cc.TLS = t
		}
		b.cli, b.cliErr = clientv3.New(cc)
		if b.cliErr != nil {
			b.cliErr = b.explain(b.cliErr) // a wrong password is refused here
		}
	})
	return b.cli, b.cliErr
}

func tlsConfig(ca, cert, key tlsFile) (*tls.Config, error) {
	t := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca.path != "" {
		pem, err := os.ReadFile(ca.path)
		if err != nil {
			return nil, &journal.TLSFileError{What: "CA certificate", Path: ca.path, Source: ca.source, Err: errors.Unwrap(err)}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, &journal.TLSFileError{What: "CA certificate", Path: ca.path, Source: ca.source, Err: errors.New("holds no PEM certificate")}
		}
		t.RootCAs = pool
	}
	if cert.path != "" || key.path != "" {
		if cert.path == "" || key.path == "" {
			named, missing := cert, "client key"
			if cert.path == "" {
				named, missing = key, "client certificate"
			}
			return nil, &journal.TLSFileError{What: missing, Source: named.source, Err: errors.New("not given: give both --etcd-cert and --etcd-key (or FENCE_ETCD_CERT and FENCE_ETCD_KEY)")}
		}
		for _, f := range []struct {
			what string
			f    tlsFile
		}{{"client certificate", cert}, {"client key", key}} {
			if _, err := os.Stat(f.f.path); err != nil {
				return nil, &journal.TLSFileError{What: f.what, Path: f.f.path, Source: f.f.source, Err: errors.Unwrap(err)}
			}
		}
		pair, err := tls.LoadX509KeyPair(cert.path, key.path)
		if err != nil {
			return nil, &journal.TLSFileError{What: "client certificate", Path: cert.path, Source: cert.source, Err: err}
		}
		t.Certificates = []tls.Certificate{pair}
	}
	return t, nil
}

// unreachable wraps err as an *UnreachableError when it is a timeout or
// an unavailable cluster; other errors pass through.
func (b *Backend) unreachable(err error) error {
	var u *journal.UnreachableError
	if err == nil || errors.As(err, &u) {
		return err
	}
	// etcd's own transient refusals ("leader changed", "no leader",
	// "request timed out") are EtcdErrors with a gRPC code, and their
	// text names no code: a leader killed mid-call must read as busy
	// (retry), not as an unexpected error.
	var ee rpctypes.EtcdError
	transient := errors.As(err, &ee) && (ee.Code() == codes.Unavailable || ee.Code() == codes.DeadlineExceeded)
	if st, ok := status.FromError(err); ok && st.Code() == codes.Unimplemented {
		// Something answered, but not as etcd does (a proxy, another
		// service on that port): as good as no etcd there (found from
		// outside: a bare gRPC "404" that named no endpoint, exit 1).
		return &journal.UnreachableError{Store: "etcd", Endpoints: b.cfg.Endpoints, Err: fmt.Errorf("%w; what answered there does not serve etcd's API (is it an etcd server?)", err)}
	}
	if transient || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "Unavailable") || strings.Contains(err.Error(), "connection refused") {
		return &journal.UnreachableError{Store: "etcd", Endpoints: b.cfg.Endpoints, Err: err}
	}
	return b.explain(err)
}

// explain adds to etcd's bare refusals what to do about them: "user name
// is empty" says nothing of where fencectl takes credentials from.
func (b *Backend) explain(err error) error {
	at := strings.Join(b.cfg.Endpoints, ",")
	// A refusal as it came over the wire (a gRPC status, as the client
	// returns at connect) is etcd's own error once converted.
	is := func(target error) bool { return errors.Is(err, target) || errors.Is(rpctypes.Error(err), target) }
	switch {
	case is(rpctypes.ErrAuthFailed):
		return fmt.Errorf("%w (etcd at %s refused the user name and password: set FENCE_ETCD_USERNAME and FENCE_ETCD_PASSWORD to ones it takes; they are never written to disk)", err, at)
	case is(rpctypes.ErrUserEmpty), is(rpctypes.ErrInvalidAuthToken), is(rpctypes.ErrAuthOldRevision):
		return fmt.Errorf("%w (etcd at %s wants a user: set FENCE_ETCD_USERNAME and FENCE_ETCD_PASSWORD; they are never written to disk)", err, at)
	case is(rpctypes.ErrPermissionDenied):
		return fmt.Errorf("%w (etcd at %s: the user in FENCE_ETCD_USERNAME needs read and write access to the keys under %s/, and for recover, which keeps a damaged journal beside it, to those under %s.aside- and the key %s.asides)", err, at, b.cfg.Prefix, b.cfg.Prefix, b.cfg.Prefix)
	case is(rpctypes.ErrNoSpace):
		return fullError{fmt.Errorf("%w (etcd at %s is out of its space quota: nothing was changed; compact and defragment it (etcdctl compact, etcdctl defrag, etcdctl alarm disarm), or raise its --quota-backend-bytes)", err, at)}
	}
	return err
}

// fullError is etcd's refusal for want of space, matching journal.ErrFull.
type fullError struct{ err error }

func (e fullError) Error() string        { return e.err.Error() }
func (e fullError) Unwrap() error        { return e.err }
func (e fullError) Is(target error) bool { return target == journal.ErrFull }

// writeLockTTL bounds how long a writer that died at the head of the
// writers' queue holds everyone up.
const writeLockTTL = 5

// newSession makes a concurrency session whose lease is granted within
// ctx: concurrency.NewSession would grant it with the session's own
// context, which must outlive the call (its keepalives run on it), so an
// etcd that does not answer would hold the caller forever, whatever its
// --timeout.
func newSession(ctx context.Context, cli *clientv3.Client, ttl int64) (*concurrency.Session, error) {
	lease, err := cli.Grant(ctx, ttl)
	if err != nil {
		return nil, err
	}
	sess, err := concurrency.NewSession(cli, concurrency.WithLease(lease.ID), concurrency.WithTTL(int(ttl)))
	if err != nil {
		c, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		cli.Revoke(c, lease.ID)
	}
	return sess, err
}

func timeoutOf(d time.Duration) time.Duration {
	switch {
	case d == 0:
		return DefaultTimeout
	case d < time.Second:
		// --timeout 0 asks not to wait for a lock; a network call still
		// needs a moment to be answered.
		return time.Second
	}
	return d
}

func (b *Backend) metaKey(name string) string { return b.cfg.Prefix + famMeta + name }

// Name names the store: "etcd".
func (b *Backend) Name() string { return "etcd" }

// Exists reports whether the prefix holds a journal. It reads all the
// meta keys (a handful), not only the version, and keeps them for the
// next Open: every command asks Exists and then opens, and a command on
// an etcd tree pays a round trip per request (6 or 7 for a claim).
func (b *Backend) Exists(string) (bool, error) {
	if _, err := b.connect(); err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.callTimeout())
	defer cancel()
	b.metaReads.Add(1)
	resp, err := b.cli.Get(ctx, b.cfg.Prefix+famMeta, clientv3.WithPrefix())
	if err != nil {
		return false, b.unreachable(err)
	}
	m := parseMeta(resp.Kvs, b.cfg.Prefix+famMeta)
	_, ok := m.values[metaVersion]
	b.keepMeta(&m, ok)
	return ok, nil
}

// keepMeta keeps m for the next Open if keep, else forgets what was kept.
func (b *Backend) keepMeta(m *metaKeys, keep bool) {
	b.metaMu.Lock()
	defer b.metaMu.Unlock()
	b.seenMeta = nil
	if keep {
		b.seenMeta = m
	}
}

// openMeta returns the meta keys for Open: those Exists just read, once,
// else read now. Taking Exists' read is as good as reading again: Open
// only checks them (a journal that is there, of a schema this reads) and
// notes the ready index's floor as a hint, and every transaction reads
// and checks them again in its snapshot, so a commit between the two
// reads changes nothing an Open decides.
func (b *Backend) openMeta(ctx context.Context) (metaKeys, error) {
	b.metaMu.Lock()
	m := b.seenMeta
	b.seenMeta = nil
	b.metaMu.Unlock()
	if m != nil {
		return *m, nil
	}
	b.metaReads.Add(1)
	resp, err := b.cli.Get(ctx, b.cfg.Prefix+famMeta, clientv3.WithPrefix())
	if err != nil {
		return metaKeys{}, b.unreachable(err)
	}
	return parseMeta(resp.Kvs, b.cfg.Prefix+famMeta), nil
}

// Path names the journal: its URL.
func (b *Backend) Path(string) string { return b.cfg.URL() }

// Open returns a handle on the journal; dir is the tree's .fence, where
// the token ceiling's files are.
func (b *Backend) Open(dir string, o journal.OpenOptions) (journal.Store, error) {
	if _, err := b.connect(); err != nil {
		return nil, err
	}
	clock := o.Clock
	if clock == nil {
		clock = func() time.Time { return time.Now().UTC() }
	}
	s := &Store{b: b, dir: dir, prefix: b.cfg.Prefix, readOnly: o.ReadOnly, timeout: timeoutOf(o.Timeout), clock: clock, onUpgrade: o.OnUpgrade}
	// An absent or foreign journal is reported at open, as bbolt does: by
	// the meta keys alone, which also say where the ready index's floor
	// is (floor.go), for the first transaction's first page.
	ctx, cancel := s.ctx()
	defer cancel()
	m, err := b.openMeta(ctx)
	if err != nil {
		return nil, err
	}
	if err := b.checkMeta(m.values); err != nil {
		return nil, err
	}
	if err := b.checkTree(dir, m.values); err != nil {
		return nil, err
	}
	s.noteFloor(m.floor)
	return s, nil
}

// checkTree refuses a journal that another tree made, by the meta keys
// Open reads anyway: the prefix this tree's journal was lost from (wiped)
// and another tree's init took. A journal with no tree id, or a config
// that records none (written before it did), is not checked. On a
// mismatch the tree's config (in dir) is read again: a recover by another
// process since this backend was made (a long-lived one's) recorded the
// new journal there, and that journal is this tree's.
func (b *Backend) checkTree(dir string, meta map[string]string) error {
	b.metaMu.Lock()
	defer b.metaMu.Unlock()
	got, ok := meta[metaTreeID]
	if !ok || b.treeID == "" || got == b.treeID {
		return nil
	}
	if c, found, err := journal.ReadConfig(dir); err == nil && found && c.SameStore(b.cfg) && c.TreeID == got {
		b.treeID = got
		return nil
	}
	return &journal.TreeMismatchError{Journal: b.cfg.URL(), Found: got, Want: b.treeID}
}

// Close closes the client (and ends the writers' queue session).
func (b *Backend) Close() error {
	if b.sess != nil {
		b.sess.Close()
	}
	if b.cli != nil {
		return b.cli.Close()
	}
	return nil
}

// Watch reports changes under the tree's prefix.
func (b *Backend) Watch(string) (journal.Watcher, error) {
	cli, err := b.connect()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{c: make(chan struct{}, 1), cancel: cancel}
	wake := func() {
		select {
		case w.c <- struct{}{}:
		default:
		}
	}
	go func() {
		// etcd ends a watch it cannot go on with: the revision it resumes
		// from after a reconnection was compacted, the member lost its
		// leader. It is made again, from now, and the reader woken to read
		// what it missed; before, log --follow and status --watch stopped
		// updating for good, silently (found from outside).
		pause := 100 * time.Millisecond
		for ctx.Err() == nil {
			for range cli.Watch(clientv3.WithRequireLeader(ctx), b.cfg.Prefix+"/", clientv3.WithPrefix()) {
				wake()
				pause = 100 * time.Millisecond
			}
			wake()
			select {
			case <-ctx.Done():
			case <-time.After(pause):
			}
			pause = min(2*pause, 2*time.Second)
		}
	}()
	return w, nil
}

type watcher struct {
	c      chan struct{}
	cancel context.CancelFunc
}

func (w *watcher) C() <-chan struct{} { return w.c }
func (w *watcher) Close() error       { w.cancel(); return nil }

// treeLockTTL is the lease, in seconds, of the tree lock's session: how
// long an init or recover that died holds the others up.
const treeLockTTL = 10

// LockTree takes the tree lock of init and recover: an etcd mutex under
// the prefix, on a session whose lease ends it if the holder dies.
func (b *Backend) LockTree(dir string, timeout time.Duration) (journal.TreeLock, error) {
	cli, err := b.connect()
	if err != nil {
		return nil, err
	}
	timeout = timeoutOf(timeout)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	sess, err := newSession(ctx, cli, treeLockTTL)
	if err != nil {
		return nil, b.unreachable(err)
	}
	m := concurrency.NewMutex(sess, b.cfg.Prefix+keyLock)
	if err := m.Lock(ctx); err != nil {
		sess.Close()
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("%w: another init or recover holds %s (one that died lets go when its etcd session's lease runs out, within %d s: then run this again)", journal.ErrBusy, b.cfg.Prefix+keyLock, treeLockTTL)
		}
		return nil, b.unreachable(err)
	}
	return &treeLock{b: b, dir: dir, sess: sess, m: m, timeout: timeout, id: ulid.Make().String()}, nil
}

type treeLock struct {
	b       *Backend
	dir     string
	sess    *concurrency.Session
	m       *concurrency.Mutex
	timeout time.Duration
	id      string // the tree id Create gives a new journal
}

// NewTreeID returns the tree id Create gives the journal it makes, so
// that init and recover can record it in the tree's config before the
// journal exists.
func (l *treeLock) NewTreeID() string { return l.id }

func (l *treeLock) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), l.timeout)
}

func (l *treeLock) Open(o journal.OpenOptions) (journal.Store, error) { return l.b.Open(l.dir, o) }

// createVersion is the version a new journal with defaults d starts at:
// the base version, unless its defaults need an etcd-3 reader (a backoff).
func createVersion(d record.Defaults) string {
	if journal.IsV2(journal.EncodeDefaults(d)) {
		return SchemaVersion
	}
	return baseVersion
}

// CheckCreate says whether Create would be refused for sharing keys with
// another tree (journal.CreateChecker), before anything is written.
func (l *treeLock) CheckCreate() error {
	ctx, cancel := l.ctx()
	defer cancel()
	return l.b.refuseOverlap(ctx)
}

// Create makes the journal in one transaction that holds only if the
// prefix has none: a create that failed left nothing.
func (l *treeLock) Create(d record.Defaults, seed uint64) error {
	ctx, cancel := l.ctx()
	defer cancel()
	b := l.b
	defer b.keepMeta(nil, false) // the meta keys Exists kept are not these
	if err := b.refuseOverlap(ctx); err != nil {
		return err
	}
	resp, err := b.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(b.metaKey(metaVersion)), "=", 0)).Then(
		clientv3.OpPut(b.metaKey(metaVersion), createVersion(d)),
		clientv3.OpPut(b.metaKey(metaTreeID), l.id),
		clientv3.OpPut(b.metaKey(metaDefaults), string(journal.EncodeDefaults(d))),
		clientv3.OpPut(b.metaKey(metaHead), head{Token: seed}.encode()),
	).Commit()
	if err != nil {
		return b.unreachable(err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("create journal %s: %w", b.cfg.URL(), fs.ErrExist)
	}
	// This backend opens the journal it made from now on (recover's
	// rebuild), whatever id the config it was made from recorded.
	b.metaMu.Lock()
	b.treeID = l.id
	b.metaMu.Unlock()
	return nil
}

// refuseOverlap refuses a new journal whose prefix lies inside another
// tree's (an ancestor prefix holds a journal) or holds keys of its own
// already, other than the mutexes of init and the writers' queue: a
// nested tree's keys fall inside the outer tree's families. One request.
func (b *Backend) refuseOverlap(ctx context.Context) error {
	p := b.cfg.Prefix
	var ops []clientv3.Op
	var ancestors []string
	for i := strings.LastIndexByte(p, '/'); i > 0; i = strings.LastIndexByte(p[:i], '/') {
		ancestors = append(ancestors, p[:i])
		ops = append(ops, clientv3.OpGet(p[:i]+famMeta+metaVersion, clientv3.WithKeysOnly()))
	}
	ops = append(ops, clientv3.OpGet(p+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(64)))
	resp, err := b.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return b.unreachable(err)
	}
	for i, a := range ancestors {
		if len(resp.Responses[i].GetResponseRange().Kvs) > 0 {
			return &journal.PrefixOverlapError{Prefix: p, Other: a}
		}
	}
	for _, kv := range resp.Responses[len(ancestors)].GetResponseRange().Kvs {
		k := string(kv.Key)
		if strings.HasPrefix(k, p+famMeta) {
			return nil // a journal of its own: Create's compare says it exists
		}
		lockKey := func(mutex string) bool {
			rest, ok := strings.CutPrefix(k, p+mutex+"/")
			return ok && !strings.Contains(rest, "/")
		}
		if !lockKey(keyLock) && !lockKey(keyWriters) {
			return &journal.PrefixOverlapError{Prefix: p, Other: k}
		}
	}
	return nil
}

// refuseNested refuses to set aside a journal inside one of whose key
// families another tree lives (made before init refused overlaps: /n and
// /n/t): deleting the family would delete that tree's journal. It reads
// MinTxnOps keys a request, which every server fencectl works with takes:
// one that takes fewer refuses the first, and recover stops there, having
// written nothing.
func (b *Backend) refuseNested(ctx context.Context) error {
	var at []string
	for _, fam := range append(slices.Clone(families), keyLock+"/", keyWriters+"/") {
		at = append(at, b.cfg.Prefix+strings.TrimSuffix(fam, "/"))
	}
	for lo := 0; lo < len(at); lo += MinTxnOps {
		var ops []clientv3.Op
		for _, p := range at[lo:min(lo+MinTxnOps, len(at))] {
			ops = append(ops, clientv3.OpGet(p+famMeta+metaVersion, clientv3.WithKeysOnly()))
		}
		resp, err := b.cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return b.refused(err, len(ops))
		}
		for i, r := range resp.Responses {
			if len(r.GetResponseRange().Kvs) > 0 {
				return &journal.PrefixOverlapError{Prefix: b.cfg.Prefix, Other: at[lo+i]}
			}
		}
	}
	return nil
}

// refused is the error for a failed request of n operations, n no more
// than MinTxnOps: etcd refused it as too many only if the server takes
// less than fencectl needs, and the error says so.
func (b *Backend) refused(err error, n int) error {
	if tooManyOps(err) {
		return fmt.Errorf("%w: %d operations in one etcd request: %v (etcd takes --max-txn-ops operations in one transaction, 128 by default, and fencectl needs %d at least: start etcd with a higher --max-txn-ops)", journal.ErrTooLarge, n, err, MinTxnOps)
	}
	return b.unreachable(err)
}

// asidePrefix is where SetAside copies a journal: beside the prefix, so
// that nothing of it is lost and Salvage still reads its tokens.
func (b *Backend) asidePrefix(now time.Time) string {
	return b.cfg.Prefix + ".aside-" + now.UTC().Format("20060102T150405.000000000Z")
}

// SetAside copies the journal to a prefix beside it, a page at a time
// (it may be larger than one etcd transaction), then deletes it in one
// transaction (a journal half deleted would pass for whole): a delete a
// family, len(families) operations, within MinTxnOps. A page is 64 keys,
// halved while etcd refuses it as too many operations (a lower
// --max-txn-ops), down to MinTxnOps.
func (l *treeLock) SetAside(now time.Time) (string, error) {
	ctx, cancel := l.ctx()
	defer cancel()
	b := l.b
	defer b.keepMeta(nil, false) // the meta keys Exists kept go with the journal
	if ok, err := b.Exists(""); err != nil || !ok {
		return "", err
	}
	if err := b.refuseNested(ctx); err != nil {
		return "", err
	}
	to := b.asidePrefix(now)
	from := b.cfg.Prefix + "/"
	page := int64(64)
	for _, fam := range families {
		p := b.cfg.Prefix + fam
		next := p
		for {
			resp, err := b.cli.Get(ctx, next, clientv3.WithRange(rangeEnd(p)), clientv3.WithLimit(page))
			if err != nil {
				return "", b.unreachable(err)
			}
			var ops []clientv3.Op
			for _, kv := range resp.Kvs {
				ops = append(ops, clientv3.OpPut(to+"/"+string(kv.Key[len(from):]), string(kv.Value)))
			}
			if len(ops) > 0 {
				_, err := b.cli.Txn(ctx).Then(ops...).Commit()
				if tooManyOps(err) && len(ops) > MinTxnOps {
					page = max(page/2, MinTxnOps)
					continue // the same page, smaller
				}
				if err != nil {
					return "", b.refused(err, len(ops))
				}
			}
			if !resp.More || len(resp.Kvs) == 0 {
				break
			}
			next = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		}
	}
	// The copy is whole: Salvage reads its tokens from here on, even if
	// the delete does not happen (the next recover copies it again).
	if _, err := b.cli.Put(ctx, b.cfg.Prefix+".asides/"+to, ""); err != nil {
		return "", b.unreachable(err)
	}
	var ops []clientv3.Op
	for _, fam := range families {
		ops = append(ops, clientv3.OpDelete(b.cfg.Prefix+fam, clientv3.WithPrefix()))
	}
	if _, err := b.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
		return "", b.refused(err, len(ops))
	}
	return "etcd://" + strings.Join(b.cfg.Endpoints, ",") + to, nil
}

// Salvage reads the highest token of the journal and of every journal set
// aside, and the current journal's defaults.
func (l *treeLock) Salvage() journal.Salvaged {
	var out journal.Salvaged
	ctx, cancel := l.ctx()
	defer cancel()
	b := l.b
	prefixes := []string{b.cfg.Prefix}
	if resp, err := b.cli.Get(ctx, b.cfg.Prefix+".asides/", clientv3.WithPrefix(), clientv3.WithKeysOnly()); err == nil {
		for _, kv := range resp.Kvs {
			prefixes = append(prefixes, strings.TrimPrefix(string(kv.Key), b.cfg.Prefix+".asides/"))
		}
	}
	for i, p := range prefixes {
		resp, err := b.cli.Get(ctx, p+famMeta, clientv3.WithPrefix())
		if err != nil {
			continue
		}
		for _, kv := range resp.Kvs {
			switch string(kv.Key) {
			case p + famMeta + metaHead:
				if h, err := decodeHead(string(kv.Value)); err == nil && (!out.TokenOK || h.Token > out.Token) {
					out.Token, out.TokenOK = h.Token, true
				}
			case p + famMeta + metaDefaults:
				if i == 0 {
					if d, err := journal.DecodeDefaults(kv.Value); err == nil && d.TTL > 0 && d.MaxAttempts > 0 {
						out.Defaults, out.DefaultsOK = d, true
					}
				}
			}
		}
	}
	return out
}

func (l *treeLock) Release() error {
	ctx, cancel := l.ctx()
	defer cancel()
	err := l.m.Unlock(ctx)
	if cerr := l.sess.Close(); err == nil {
		err = cerr
	}
	return err
}

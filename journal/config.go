package journal

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Which store holds a tree's journal.
//
// A tree whose journal is not the default bbolt file names its store in
// .fence/journal.json, written by init, so that every later command on the
// tree finds it with no flag. The file holds where the journal is and how
// to reach it (endpoints, prefix, the paths of TLS files), never a secret:
// passwords come from the environment only.

// ConfigName is the backend's config file in a tree's meta directory.
const ConfigName = "journal.json"

// Config names a tree's journal store.
type Config struct {
	Backend   string   `json:"backend"` // "etcd"; a tree with no config file uses bbolt
	Endpoints []string `json:"endpoints,omitempty"`
	Prefix    string   `json:"prefix,omitempty"`
	// TLS files, by path; the key file's content is never copied.
	CACert string `json:"cacert,omitempty"`
	Cert   string `json:"cert,omitempty"`
	Key    string `json:"key,omitempty"`
	// TLSFromFlags: the TLS paths above were given as init's flags just
	// now, and win over the FENCE_ETCD_* variables (which win over paths
	// a tree's config recorded). Never written.
	TLSFromFlags bool `json:"-"`
	// TreeID is the id of the journal this tree made (init, recover): a
	// store that finds another tree's journal where the config points
	// refuses it (*TreeMismatchError) instead of letting this tree act on
	// it. Empty in configs written before it was recorded: not checked.
	TreeID string `json:"tree_id,omitempty"`
}

// TreeMismatchError says the journal a tree's config points to was made
// by another tree: the tree's own journal was lost there (an etcd prefix
// wiped) and another tree's init took the place. Nothing was done: acting
// on it would claim, move and complete the other tree's tasks.
type TreeMismatchError struct {
	Journal string // where: the URL
	Found   string // the tree id of the journal there
	Want    string // the tree id this tree's config records
}

func (e *TreeMismatchError) Error() string {
	return fmt.Sprintf("the journal at %s belongs to another task tree (id %s); this tree expects %s (tree_id in .fence/journal.json), so nothing was done. If this tree's journal was lost and another tree took its prefix, give this tree a prefix of its own in .fence/journal.json and run `fencectl recover`; if .fence/journal.json names the wrong journal, fix it", e.Journal, e.Found, e.Want)
}

// URL renders c as `--journal` takes it: etcd://h:p,h:p/prefix.
func (c Config) URL() string {
	return c.Backend + "://" + strings.Join(c.Endpoints, ",") + c.Prefix
}

// SameStore reports whether c and o name the same journal.
func (c Config) SameStore(o Config) bool {
	a, b := append([]string(nil), c.Endpoints...), append([]string(nil), o.Endpoints...)
	sort.Strings(a)
	sort.Strings(b)
	return c.Backend == o.Backend && c.Prefix == o.Prefix && strings.Join(a, ",") == strings.Join(b, ",")
}

// prefixPattern: a prefix is a path of plain words, so that it can never
// reach into another tree's keys or be read two ways. Compiled on first
// use, not at package init: every process links this package and almost
// none parses a URL, and the compile cost every claim about 0.02 ms.
var prefixPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(/[A-Za-z0-9._-]+)+$`) })

// ParseURL reads a `--journal` value: etcd://HOST:PORT[,HOST:PORT...]/PREFIX.
// The prefix is required, so that several trees can share one cluster.
func ParseURL(s string) (Config, error) {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok || scheme != "etcd" {
		return Config{}, fmt.Errorf("journal %q: want etcd://HOST:PORT[,HOST:PORT...]/PREFIX (a tree without --journal keeps its journal in .fence/journal.db)", s)
	}
	hosts, path, _ := strings.Cut(rest, "/")
	c := Config{Backend: scheme, Prefix: strings.TrimRight("/"+path, "/")}
	// USER[:PASSWORD]@ in the URL: refused, and never repeated (an error
	// message ends up in logs): credentials come from variables only.
	if i := strings.LastIndex(hosts, "@"); i >= 0 {
		return Config{}, fmt.Errorf("journal etcd://%s@%s/...: a user name or password does not go in the URL (it would be written to .fence/journal.json and shown in messages): set FENCE_ETCD_USERNAME and FENCE_ETCD_PASSWORD instead, and give etcd://%s/PREFIX", strings.Repeat("*", 3), hosts[i+1:], hosts[i+1:])
	}
	if hosts == "" {
		return Config{}, fmt.Errorf("journal %q: no endpoint; want etcd://HOST:PORT[,HOST:PORT...]/PREFIX", s)
	}
	for _, h := range strings.Split(hosts, ",") {
		_, port, err := net.SplitHostPort(h)
		if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 1 || n > 65535 {
			return Config{}, fmt.Errorf("journal %q: endpoint %q is not HOST:PORT with a port from 1 to 65535", s, h)
		}
		c.Endpoints = append(c.Endpoints, h)
	}
	if c.Prefix == "" {
		return Config{}, fmt.Errorf("journal %q: no prefix; add one (etcd://%s/my-tree) so that several trees can share the cluster", s, hosts)
	}
	if !prefixPattern().MatchString(c.Prefix) || strings.Contains(c.Prefix, "/./") || strings.Contains(c.Prefix, "/../") || strings.HasSuffix(c.Prefix, "/.") || strings.HasSuffix(c.Prefix, "/..") {
		return Config{}, fmt.Errorf("journal %q: prefix %q may hold only letters, digits, '.', '_', '-' and '/' between words", s, c.Prefix)
	}
	return c, nil
}

// ReadConfig reads the config file of the journal of dir; found is false
// when there is none (the tree uses bbolt).
func ReadConfig(dir string) (c Config, found bool, err error) {
	b, err := ReadRegular(filepath.Join(dir, ConfigName), 1<<20)
	if errors.Is(err, fs.ErrNotExist) {
		return c, false, nil
	}
	if err != nil {
		return c, false, err
	}
	if err := json.Unmarshal(b, &c); err != nil || c.Backend == "" {
		return c, false, fmt.Errorf("%s is not a journal config (%v): it names the store that holds this tree's journal; restore it, or write it again with init --journal", filepath.Join(dir, ConfigName), err)
	}
	return c, true, nil
}

// WriteConfig writes c as the config of the journal of dir: mode 0600,
// synced, replacing atomically.
func WriteConfig(dir string, c Config) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(dir, ConfigName)
	tmp := fmt.Sprintf("%s.tmp-%d-%d", path, os.Getpid(), time.Now().UnixNano())
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return fsyncPath(dir)
}

// RemoveConfig removes the config of the journal of dir, if any.
func RemoveConfig(dir string) error {
	err := os.Remove(filepath.Join(dir, ConfigName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// A Driver makes the Backend a config names. Backends other than bbolt
// register one (as database/sql drivers do), so that only a program that
// links a backend pays for it: the etcd client's start-up cost stays out
// of a bbolt-only binary.
type Driver func(Config) (Backend, error)

var (
	driversMu sync.Mutex
	drivers   = map[string]Driver{}
)

// Register makes a backend available under name. It panics if called twice
// for one name.
func Register(name string, d Driver) {
	driversMu.Lock()
	defer driversMu.Unlock()
	if _, dup := drivers[name]; dup {
		panic("journal: Register called twice for " + name)
	}
	drivers[name] = d
}

// MissingDriverError says a tree's journal is in a store this program does
// not link.
type MissingDriverError struct{ Backend string }

func (e *MissingDriverError) Error() string {
	return fmt.Sprintf("this tree's journal is in %s, and this program does not include the %s backend (the fencectl command runs fencectl-%s, installed beside it, for such trees)", e.Backend, e.Backend, e.Backend)
}

// BackendOf returns the Backend that c names.
func BackendOf(c Config) (Backend, error) {
	driversMu.Lock()
	d, ok := drivers[c.Backend]
	driversMu.Unlock()
	if !ok {
		return nil, &MissingDriverError{Backend: c.Backend}
	}
	return d(c)
}

// Registered reports whether a backend of that name is linked.
func Registered(name string) bool {
	driversMu.Lock()
	defer driversMu.Unlock()
	_, ok := drivers[name]
	return ok
}

package etcd

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencectl/fencectl/journal"
)

// famConstants reads every fam* constant of keys.go: a family added there
// is covered by the tests below without anyone listing it again.
func famConstants(t *testing.T) map[string]string {
	f, err := parser.ParseFile(token.NewFileSet(), "keys.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	fams := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		if v, ok := n.(*ast.ValueSpec); ok && len(v.Names) == 1 && strings.HasPrefix(v.Names[0].Name, "fam") && len(v.Values) == 1 {
			if lit, ok := v.Values[0].(*ast.BasicLit); ok {
				s, _ := strconv.Unquote(lit.Value)
				fams[v.Names[0].Name] = s
			}
		}
		return true
	})
	if len(fams) < 10 {
		t.Fatalf("found %d key families in keys.go: %v", len(fams), fams)
	}
	return fams
}

// SetAside (recover) copies and deletes every family of the journal: a
// key left behind (the dependents, label, due or unblock index) would
// mislead the journal recover builds next, and be missing from the copy.
func TestSetAside_EveryFamily(t *testing.T) {
	cfg, dir := newJournal(t)
	b, _ := open(t, cfg, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fams := famConstants(t)
	for name, fam := range fams {
		if _, err := b.cli.Put(ctx, cfg.Prefix+fam+"probe", name); err != nil {
			t.Fatal(err)
		}
	}
	lock, err := b.LockTree(dir, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	aside, err := lock.SetAside(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := b.cli.Get(ctx, cfg.Prefix+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		if k := string(kv.Key); !strings.HasPrefix(k, cfg.Prefix+keyLock) && !strings.HasPrefix(k, cfg.Prefix+keyWriters) {
			t.Errorf("after SetAside the journal still holds %s", k)
		}
	}
	to := aside[strings.LastIndex(aside, "/"+strings.TrimPrefix(cfg.Prefix, "/")):]
	for name, fam := range fams {
		got, err := b.cli.Get(ctx, to+fam+"probe")
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Kvs) != 1 || string(got.Kvs[0].Value) != name {
			t.Errorf("the copy at %s lacks family %s (%s)", to, name, fam)
		}
	}
}

// A tree nested in one of the journal's families (made before init
// refused overlapping prefixes) keeps its journal: SetAside refuses, and
// deletes nothing.
func TestSetAside_RefusesANestedTree(t *testing.T) {
	cfg, dir := newJournal(t)
	b, _ := open(t, cfg, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nested := cfg.Prefix + famTask + "m/version"
	if _, err := b.cli.Put(ctx, nested, baseVersion); err != nil {
		t.Fatal(err)
	}
	lock, err := b.LockTree(dir, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	_, err = lock.SetAside(time.Now())
	if _, ok := errors.AsType[*journal.PrefixOverlapError](err); !ok {
		t.Fatalf("SetAside with a tree nested at %s: %v, want a PrefixOverlapError", nested, err)
	}
	for _, k := range []string{nested, cfg.Prefix + famMeta + metaVersion} {
		if got, err := b.cli.Get(ctx, k); err != nil || len(got.Kvs) != 1 {
			t.Errorf("after the refused SetAside, %s is gone (%v)", k, err)
		}
	}
}

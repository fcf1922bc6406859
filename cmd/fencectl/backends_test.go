package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/fencectl/fencectl/cmd/fencectl/clitest"
)

// scriptBackend is one way every script runs: a journal store, and the
// program users run as fencectl.
type scriptBackend struct {
	name    string // the subtest's
	journal string // bolt or etcd: the scripts' [bolt] and [etcd] conditions
	// front runs fencectl as make build installs it: the front
	// (cmd/front), which sends an agent's steps to the tree's daemon and
	// hands every other command to fencectl-full, this test binary.
	front bool
	// start prepares the store for one test and returns the environment
	// each script gets: for etcd, FENCE_JOURNAL with a prefix of the
	// script's own, so that `fencectl init` makes an etcd tree.
	start func(t *testing.T) func() map[string]string
}

// scriptBackends are the ways every script runs.
var scriptBackends = []scriptBackend{
	{name: "bolt", journal: "bolt", start: func(*testing.T) func() map[string]string { return func() map[string]string { return nil } }},
	{name: "etcd", journal: "etcd", start: etcdScripts},
	{name: "front", journal: "bolt", front: true, start: func(*testing.T) func() map[string]string { return func() map[string]string { return nil } }},
	{name: "front-etcd", journal: "etcd", front: true, start: etcdScripts},
}

// etcdScripts starts the embedded etcd the scripts share and gives each
// script a prefix of its own.
func etcdScripts(t *testing.T) func() map[string]string {
	endpoints := clitest.Etcd(t)
	var n atomic.Int64
	return func() map[string]string {
		return map[string]string{"FENCE_JOURNAL": fmt.Sprintf("etcd://%s/script-%d", endpoints, n.Add(1))}
	}
}

// frontDir builds the front into a directory of t's as fencectl, with
// this test binary beside it as fencectl-full and fencectl-etcd (it
// links the etcd backend), as make build lays them out.
func frontDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "fencectl"), "../front")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ../front: %v\n%s", err, out)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"fencectl-full", "fencectl-etcd"} {
		if err := os.Symlink(self, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// binary is the fencectl b's tests run in their own processes.
func (b scriptBackend) binary(t *testing.T) clitest.Binary {
	if b.front {
		return clitest.Binary{Path: filepath.Join(frontDir(t), "fencectl")}
	}
	return fencectlBin
}

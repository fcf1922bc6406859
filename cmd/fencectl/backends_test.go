package main

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/fencectl/fencectl/cmd/fencectl/clitest"
)

// scriptBackends are the journal stores every script runs on. start
// prepares the store for one test and returns the environment each script
// gets: for etcd, FENCE_JOURNAL with a prefix of the script's own, so that
// `fencectl init` makes an etcd tree.
var scriptBackends = []struct {
	name  string
	start func(t *testing.T) func() map[string]string
}{
	{"bolt", func(*testing.T) func() map[string]string { return func() map[string]string { return nil } }},
	{"etcd", func(t *testing.T) func() map[string]string {
		endpoints := clitest.Etcd(t)
		var n atomic.Int64
		return func() map[string]string {
			return map[string]string{"FENCE_JOURNAL": fmt.Sprintf("etcd://%s/script-%d", endpoints, n.Add(1))}
		}
	}},
}

package main

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestBuild_BinariesLinkOnlyWhatTheyServe reads the build recipe of the
// Makefile (make build) and lists, for each binary, the packages its
// tags link: fencectl, the front, which every step starts, links none of
// the command set (no CLI library, no journal, no net); fencectl-full
// links neither net/http, the Prometheus client, the MCP SDK nor the etcd
// client (their package initialisers cost milliseconds per process);
// fencectl-etcd links etcd only; fencectl-serve and fencectl-mcp link
// what `serve` and `mcp` hand to them.
func TestBuild_BinariesLinkOnlyWhatTheyServe(t *testing.T) {
	const (
		prom  = "github.com/prometheus/client_golang/prometheus"
		http  = "net/http"
		mcp   = "github.com/modelcontextprotocol/go-sdk/mcp"
		etcd  = "go.etcd.io/etcd/client/v3"
		cliV2 = "github.com/urfave/cli/v2"
	)
	want := map[string]struct{ with, without []string }{
		"fencectl-full":  {with: []string{cliV2}, without: []string{prom, http, mcp, etcd}},
		"fencectl-etcd":  {with: []string{etcd}, without: []string{prom, mcp}},
		"fencectl-serve": {with: []string{prom, http, etcd}, without: []string{mcp}},
		"fencectl-mcp":   {with: []string{mcp, etcd}, without: []string{prom}},
	}
	builds := makeBuilds(t)
	front := regexp.MustCompile(`-o \$\(BIN\) \./cmd/front\n`)
	if recipe := makeRecipe(t); !front.MatchString(recipe) {
		t.Errorf("make build does not build bin/fencectl from ./cmd/front:\n%s", recipe)
	}
	out, err := exec.Command("go", "list", "-deps", "../front").Output()
	if err != nil {
		t.Fatalf("go list -deps ../front: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		switch {
		case p == cliV2, p == "net", p == "encoding/json", p == "go.etcd.io/bbolt", strings.HasPrefix(p, "github.com/fencectl/fencectl/fence"),
			strings.HasPrefix(p, "github.com/fencectl/fencectl/journal"):
			t.Errorf("the front (cmd/front) links %s", p)
		}
	}
	for bin, w := range want {
		tags, ok := builds[bin]
		if !ok {
			t.Errorf("make build does not build bin/%s (it builds %v)", bin, builds)
			continue
		}
		out, err := exec.Command("go", "list", "-deps", "-tags", tags, ".").Output()
		if err != nil {
			t.Fatalf("go list -deps -tags %s: %v", tags, err)
		}
		deps := map[string]bool{}
		for _, p := range strings.Fields(string(out)) {
			deps[p] = true
		}
		for _, p := range w.with {
			if !deps[p] {
				t.Errorf("%s (-tags %s) does not link %s", bin, tags, p)
			}
		}
		for _, p := range w.without {
			if deps[p] {
				t.Errorf("%s (-tags %s) links %s", bin, tags, p)
			}
		}
	}
}

// makeRecipe returns the recipe of the Makefile's build target.
func makeRecipe(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	recipe := regexp.MustCompile(`(?m)^build:.*\n((?:\t.*\n)+)`).FindStringSubmatch(string(b))
	if recipe == nil {
		t.Fatal("no build target in the Makefile")
	}
	return recipe[1]
}

// makeBuilds returns the -tags of each binary the Makefile's build target
// makes from cmd/fencectl, by its name, with the Makefile's variables
// expanded.
func makeBuilds(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^([A-Z_]+)\s*\?=\s*(.*)$`).FindAllStringSubmatch(string(b), -1) {
		vars[m[1]] = strings.TrimSpace(m[2])
	}
	expand := func(s string) string {
		return regexp.MustCompile(`\$\(([A-Z_]+)\)`).ReplaceAllStringFunc(s, func(v string) string {
			return vars[v[2:len(v)-1]]
		})
	}
	recipe := regexp.MustCompile(`(?m)^build:.*\n((?:\t.*\n)+)`).FindStringSubmatch(string(b))
	if recipe == nil {
		t.Fatal("no build target in the Makefile")
	}
	builds := map[string]string{}
	for _, m := range regexp.MustCompile(`-tags (\S+) .*-o (\S+) \./cmd/fencectl`).FindAllStringSubmatch(recipe[1], -1) {
		out := expand(m[2])
		builds[out[strings.LastIndex(out, "/")+1:]] = expand(m[1])
	}
	return builds
}

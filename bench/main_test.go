package bench

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The binaries the benchmarks start, built once by TestMain (only when
// benchmarks run: `make test` compiles this package and builds nothing).
var (
	fencectlBin      string // the release binary: make build's fencectl, the front (cmd/front)
	fencectlFullBin  string // make build's fencectl-full, beside fencectlBin: its tags and flags
	fencectlPlainBin string // a plain `go build`, docs generator linked in
	fencectlEtcdBin  string // make build's fencectl-etcd, beside fencectlBin
	etcdBenchBin     string // bench/etcdbench: the etcd member, the etcd library rows
	helloBin         string // a Go hello-world: the process-start ceiling
	bareClaimBin     string // testdata/bareclaim: a durable claim with nothing else
	selfBin          string // this test binary, for the BENCH_HELPER commands
)

// workDir holds the binaries and the trees that are built once and shared
// by several benchmarks (the scale trees). It is on the same file system as
// every b.TempDir(), so all figures are measured on the same disk.
var workDir string

// TestMain builds the binaries the benchmarks run, and doubles as the
// helper commands they start (see helperMain).
func TestMain(m *testing.M) {
	if h := os.Getenv("BENCH_HELPER"); h != "" {
		os.Exit(helperMain(h))
	}
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		os.Exit(m.Run()) // no benchmarks asked for: build nothing
	}
	code, err := setUp()
	if err == nil {
		mark := markCPU()
		code = m.Run()
		fmt.Printf("benchothercpu: %.1f\n", otherCPU(mark, markCPU()))
	} else {
		fmt.Fprintln(os.Stderr, "bench set-up:", err)
		code = 1
	}
	os.RemoveAll(workDir)
	os.Exit(code)
}

func setUp() (int, error) {
	dir, err := os.MkdirTemp("", "fencectl-bench")
	if err != nil {
		return 1, err
	}
	workDir = dir
	if selfBin, err = os.Executable(); err != nil {
		return 1, err
	}
	printBenchDir(dir)
	fencectlBin = filepath.Join(dir, "fencectl")
	fencectlFullBin = filepath.Join(dir, "fencectl-full")
	fencectlPlainBin = filepath.Join(dir, "fencectl-plain")
	helloBin = filepath.Join(dir, "hello")
	// The make build binaries: the front, and beside it the full command
	// set, static (CGO_ENABLED=0) with the docs generator and the MCP and
	// web servers left out, exactly as the Makefile builds them; and a
	// plain go build of the full command set.
	if err := goBuild("", []string{"CGO_ENABLED=0"}, "build", "-trimpath", "-o", fencectlBin, "../cmd/front"); err != nil {
		return 1, err
	}
	if err := goBuild("", []string{"CGO_ENABLED=0"}, "build", "-tags", "urfave_cli_no_docs,nomcp,noserve", "-trimpath", "-o", fencectlFullBin, "../cmd/fencectl"); err != nil {
		return 1, err
	}
	if err := goBuild("", nil, "build", "-o", fencectlPlainBin, "../cmd/fencectl"); err != nil {
		return 1, err
	}
	// fencectl-etcd beside fencectl, as make build and make install put
	// them: fencectl hands etcd trees to it.
	fencectlEtcdBin = filepath.Join(dir, "fencectl-etcd")
	if err := goBuild("", []string{"CGO_ENABLED=0"}, "build", "-tags", "urfave_cli_no_docs,etcd,nomcp,noserve", "-trimpath", "-o", fencectlEtcdBin, "../cmd/fencectl"); err != nil {
		return 1, err
	}
	etcdBenchBin = filepath.Join(dir, "etcdbench")
	if err := goBuild("", nil, "build", "-o", etcdBenchBin, "./etcdbench"); err != nil {
		return 1, err
	}
	hello := filepath.Join(dir, "hello-src")
	if err := os.MkdirAll(hello, 0o755); err != nil {
		return 1, err
	}
	src := "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello\") }\n"
	if err := os.WriteFile(filepath.Join(hello, "main.go"), []byte(src), 0o644); err != nil {
		return 1, err
	}
	if err := os.WriteFile(filepath.Join(hello, "go.mod"), []byte("module hello\n\ngo 1.22\n"), 0o644); err != nil {
		return 1, err
	}
	if err := goBuild(hello, nil, "build", "-o", helloBin, "."); err != nil {
		return 1, err
	}
	bareClaimBin = filepath.Join(dir, "bareclaim")
	if err := goBuild("testdata/bareclaim", nil, "build", "-o", bareClaimBin, "."); err != nil {
		return 1, err
	}
	return 0, nil
}

func goBuild(dir string, env []string, args ...string) error {
	build := exec.Command("go", args...)
	build.Dir = dir
	build.Env = append(append(os.Environ(), "GOFLAGS="), env...) // a plain build means plain
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// printBenchDir prints, as go-bench configuration lines (benchstat keeps
// them as labels; bench/report puts them in the doc), where the trees live,
// on what file system, and the load average at the start. TestMain adds
// benchothercpu at the end: the % of the machine's CPU that other processes
// used during the whole run.
func printBenchDir(dir string) {
	dev, fstype := mountOf(dir)
	fmt.Printf("benchdate: %s\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Printf("benchdir: %s\nbenchfs: %s %s\n", filepath.Dir(dir), fstype, dev)
	if load, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Printf("benchload: %s\n", strings.Join(strings.Fields(string(load))[:3], " "))
	}
}

// mountOf finds the mount holding path in /proc/mounts (longest prefix).
func mountOf(path string) (dev, fstype string) {
	f, err := os.Open("/proc/mounts")
	if err != nil {
		return "?", "?"
	}
	defer f.Close()
	best := -1
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 3 {
			continue
		}
		mp := fs[1]
		if (path == mp || strings.HasPrefix(path, strings.TrimSuffix(mp, "/")+"/")) && len(mp) > best {
			best, dev, fstype = len(mp), fs[0], fs[2]
		}
	}
	return dev, fstype
}

// fencectl runs the release binary on dir and fails b on error.
func fencectl(b testing.TB, dir string, args ...string) []byte {
	b.Helper()
	cmd := exec.Command(fencectlBin, args...)
	cmd.Env = append(os.Environ(), "FENCE_DIR="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("fencectl %v: %v\n%s", args, err, out)
	}
	return out
}

// waitFile waits for path to appear.
func waitFile(b testing.TB, path string) []byte {
	b.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if data, err := os.ReadFile(path); err == nil && len(data) > 0 {
			return data
		}
		time.Sleep(time.Millisecond)
	}
	b.Fatalf("%s never appeared", path)
	return nil
}

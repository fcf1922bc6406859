package torture

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/fencectl/fencectl/cmd/fencectl/clitest"
)

// TestHandOff_WithoutFencectlEtcd: the plain fencectl, alone (no
// fencectl-etcd beside it or on PATH), on an etcd tree exits 1 and says
// what to install, before doing anything; beside fencectl-etcd (every
// other etcd row of this suite) it hands the command over.
func TestHandOff_WithoutFencectlEtcd(t *testing.T) {
	dir := t.TempDir()
	alone := filepath.Join(dir, "bin", "fencectl")
	if err := os.MkdirAll(filepath.Dir(alone), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(fencectlBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(alone, b, 0o755); err != nil {
		t.Fatal(err)
	}
	tree := filepath.Join(dir, "tree")
	if err := os.MkdirAll(filepath.Join(tree, ".fence"), 0o700); err != nil {
		t.Fatal(err)
	}
	conf := `{"backend": "etcd", "endpoints": ["127.0.0.1:1"], "prefix": "/x"}`
	if err := os.WriteFile(filepath.Join(tree, ".fence", "journal.json"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(alone, "--dir", tree, "claim", "--agent", "a")
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(alone))
	out, err := cmd.CombinedOutput()
	if code := clitest.ExitCode(err); code != 1 {
		t.Fatalf("plain fencectl without fencectl-etcd: exit %d, want 1\n%s", code, out)
	}
	if !strings.Contains(string(out), "fencectl-etcd is not beside this fencectl nor on PATH") {
		t.Errorf("the message does not say what is missing:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(tree, "claimed")); err == nil {
		t.Errorf("the refused command made claimed/ in the tree")
	}
}

// TestHandOff_Serve: fencectl built as make build builds it (-tags
// noserve: no web server, no Prometheus client) hands `serve` to
// fencectl-serve beside it, which serves /metrics; alone, it exits 1 and
// names what to install, and a bad --http is refused (exit 2) before any
// hand-off. fencectl-serve here is this suite's fencectl, which links the
// server.
func TestHandOff_Serve(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "bin", "fencectl")
	if err := buildFencectl(plain, "noserve"); err != nil {
		t.Fatal(err)
	}
	tree := filepath.Join(dir, "tree")
	run := func(args ...string) *exec.Cmd {
		cmd := exec.Command(plain, append([]string{"--dir", tree}, args...)...)
		cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(plain))
		return cmd
	}
	if out, err := run("init").CombinedOutput(); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	if out, err := run("add", "--id", "t1").CombinedOutput(); err != nil {
		t.Fatalf("add: %v\n%s", err, out)
	}
	out, err := run("serve", "--http", "nowhere").CombinedOutput()
	if code := clitest.ExitCode(err); code != 2 || !strings.Contains(string(out), "give HOST:PORT") {
		t.Errorf("serve --http nowhere without fencectl-serve: exit %d, want 2 and the rule\n%s", code, out)
	}
	out, err = run("serve", "--http", "127.0.0.1:0").CombinedOutput()
	if code := clitest.ExitCode(err); code != 1 || !strings.Contains(string(out), "fencectl-serve is not beside this fencectl nor on PATH") {
		t.Fatalf("serve without fencectl-serve: exit %d, want 1 and what is missing\n%s", code, out)
	}

	b, err := os.ReadFile(fencectlBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bin", "fencectl-serve"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	addrFile := filepath.Join(dir, "addr")
	srv := run("serve", "--http", "127.0.0.1:0", "--addr-file", addrFile)
	var stderr strings.Builder
	srv.Stderr = &stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Process.Kill()
	addr := clitest.WaitFile(t, addrFile)
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `fencectl_tasks{state="available"} 1`) || !strings.Contains(string(body), "go_goroutines") {
		t.Errorf("/metrics through the hand-off: %d\n%s", resp.StatusCode, body)
	}
	srv.Process.Signal(syscall.SIGTERM)
	if code := clitest.WaitExit(t, srv); code != 0 {
		t.Errorf("fencectl-serve after SIGTERM: exit %d, want 0\n%s", code, stderr.String())
	}
}

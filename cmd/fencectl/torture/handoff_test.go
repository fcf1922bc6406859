package torture

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

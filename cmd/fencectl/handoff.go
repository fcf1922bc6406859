package main

import (
	"fmt"
	"os"
	"strings"
)

// A command this binary lacks the code for runs in a sibling binary:
// fencectl-etcd for an etcd tree, fencectl-mcp, fencectl-serve, found
// beside this one or else on PATH. After a partial upgrade the sibling
// can be another version (found from outside: `fencectl --version` said
// the new one while an old fencectl-mcp answered, and showed live tokens
// the new one hides). So the handing binary names its version in
// handoffVersionEnv, and a sibling of another version refuses to run.

// handoffVersionEnv is the variable that carries the version across.
const handoffVersionEnv = "FENCE_HANDOFF_VERSION"

// handoffEnv is this process's environment, with its version for the
// sibling it hands on to.
func handoffEnv() []string {
	env := []string{handoffVersionEnv + "=" + buildVersion()}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, handoffVersionEnv+"=") {
			env = append(env, kv)
		}
	}
	return env
}

// checkHandoff refuses to run under the name of a fencectl of another
// version, and removes the variable, so that nothing this process starts
// (run's command, a fencectl in it) takes it for its own.
func checkHandoff() error {
	want := os.Getenv(handoffVersionEnv)
	os.Unsetenv(handoffVersionEnv)
	if want == "" {
		return nil
	}
	if have := buildVersion(); want != have {
		exe, _ := os.Executable()
		return fmt.Errorf("%s is version %s, but the fencectl that handed this command to it is version %s: a partial upgrade left binaries of two versions; nothing was done. Install them together (`make install` puts every fencectl binary in place), and check with `fencectl --version` and `%s --version`", exe, have, want, exe)
	}
	return nil
}

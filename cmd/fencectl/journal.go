package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/fence"
)

// Where a tree's journal is. A bbolt tree needs nothing here; an etcd tree
// names its cluster in .fence/journal.json (init --journal), and its
// commands run in fencectl-etcd: the etcd client costs every process about
// 2 ms of start-up, which bbolt trees must not pay, so the fencectl binary
// does not link it and hands such trees to the one that does.

// journalFlags are init's flags that choose the journal's store.
func journalFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "journal", EnvVars: []string{"FENCE_JOURNAL"}, Usage: "keep the journal in etcd: etcd://HOST:PORT[,HOST:PORT...]/PREFIX (default: .fence/journal.db)"},
		&cli.StringFlag{Name: "etcd-cacert", EnvVars: []string{"FENCE_ETCD_CACERT"}, Usage: "CA certificate file that signs etcd's server certificate (path recorded, for every later command)"},
		&cli.StringFlag{Name: "etcd-cert", EnvVars: []string{"FENCE_ETCD_CERT"}, Usage: "client certificate file for etcd (path recorded)"},
		&cli.StringFlag{Name: "etcd-key", EnvVars: []string{"FENCE_ETCD_KEY"}, Usage: "client key file for etcd (path recorded, never its content)"},
	}
}

// journalChoice is what init's flags ask for: nil for the default bbolt
// journal.
func journalChoice(c *cli.Context) (*fence.JournalConfig, error) {
	url := c.String("journal")
	if url == "" {
		for _, f := range []string{"etcd-cacert", "etcd-cert", "etcd-key"} {
			if c.IsSet(f) {
				return nil, usagef("--%s applies to an etcd journal only: add --journal etcd://HOST:PORT/PREFIX", f)
			}
		}
		return nil, nil
	}
	cfg, err := fence.ParseJournalURL(url)
	if err != nil {
		return nil, err
	}
	cfg.CACert, cfg.Cert, cfg.Key = c.String("etcd-cacert"), c.String("etcd-cert"), c.String("etcd-key")
	for _, p := range []*string{&cfg.CACert, &cfg.Cert, &cfg.Key} {
		if *p == "" {
			continue
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return nil, err
		}
		if _, err := os.Stat(abs); err != nil {
			return nil, usagef("TLS file %s: %v", *p, errors.Unwrap(err))
		}
		*p = abs
	}
	// The flags given win over the variables (which later commands read
	// over the recorded paths): init connects with the files it records.
	cfg.TLSFromFlags = c.IsSet("etcd-cacert") || c.IsSet("etcd-cert") || c.IsSet("etcd-key")
	return &cfg, nil
}

// handOff runs the command in fencectl-<backend> when the tree (or
// init --journal) needs a backend this binary does not link. It runs
// before the command does anything, so the other binary starts afresh
// with the same arguments, input and environment.
func handOff(c *cli.Context) error {
	name := ""
	if c.Command != nil && c.Command.Name == "init" {
		cfg, err := journalChoice(c)
		if err != nil {
			return err
		}
		if cfg != nil {
			name = cfg.Backend
		}
	}
	if name == "" {
		cfg, found, err := fence.TreeJournal(treeRoot(c))
		if err != nil && !errors.Is(err, fs.ErrPermission) {
			return err
		}
		name = cfg.Backend
		if !found {
			name = "bbolt"
		}
	}
	// An etcd tree's everyday steps go to the host's daemon for it, which
	// keeps one connection and commits in groups (daemon.go).
	if code, ok, err := forward(c, name); err != nil || ok {
		if err != nil {
			return err
		}
		return forwarded{code}
	}
	if name == "bbolt" || fence.HasBackend(name) {
		return nil
	}
	missing := &fence.MissingDriverError{Backend: name}
	if !exitsAfterRun { // called in-process by a test: nothing to exec
		return missing
	}
	return execBeside("fencectl-"+name, missing)
}

// execBeside runs bin in place of this process, with the same arguments
// and environment: the one beside this executable, else the one on PATH.
// missing says what this binary lacks; it is returned, with where bin was
// looked for, when bin is not found (or is this very binary, which would
// run itself again forever).
func execBeside(bin string, missing error) error {
	path, err := besidePath(bin, missing)
	if err != nil {
		return err
	}
	return syscall.Exec(path, append([]string{path}, os.Args[1:]...), handoffEnv())
}

// besidePath is where bin is: beside this executable, else on PATH.
func besidePath(bin string, missing error) (string, error) {
	exe, _ := os.Executable()
	if exe != "" {
		if filepath.Base(exe) == bin {
			// This is fencectl-<name> built without what it is for:
			// running itself again would never end.
			return "", fmt.Errorf("%w; %s was built without it: build it with `make build`", missing, exe)
		}
		if p := filepath.Join(filepath.Dir(exe), bin); isExecutable(p) {
			return p, nil
		}
	}
	p, err := exec.LookPath(bin)
	if err != nil {
		return "", fmt.Errorf("%w; %s is not beside this fencectl nor on PATH: install it (make install puts it in place)", missing, bin)
	}
	return p, nil
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

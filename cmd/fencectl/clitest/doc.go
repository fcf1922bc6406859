// Package clitest holds what the tests that drive fencectl as a process
// share: cmd/fencectl's own tests (which run their test binary as
// fencectl) and the torture suite in cmd/fencectl/torture (which builds the
// real binary), so each helper exists once.
//
// # Starting fencectl
//
// Binary says how to start fencectl; RunTree is a tree on a test clock
// file, driven through it; ExitCode reads a finished command's exit code.
//
// # Processes
//
// WaitFile, WaitExit, HostPid, Alive and LockWaiters observe the processes
// a command starts; TreeScript, TreePids, RequireContainment, AssertDead
// and WaitDead check that nothing a task starts outlives it.
//
// # Reserved words as ids
//
// IDSteps and CheckReservedID walk one task, named by a word the CLI
// parser knows, through every command that takes an id. Each suite takes
// its words from where it can see them (the app in process, --help from
// outside).
//
// The constants mirror fencectl's exit codes and its containment
// variable; cmd/fencectl's tests check that they agree with the binary's.
package clitest

// fencectl's exit codes (README, "Exit codes"), and the environment
// variable that forces run's containment, as the binary knows them.
const (
	ExitOK           = 0
	ExitError        = 1
	ExitUsage        = 2
	ExitFenced       = 3
	ExitNotAvailable = 4
	ExitBusy         = 5
	ExitNoSuchTask   = 6
	ExitDrift        = 7

	ContainEnv    = "FENCE_RUN_CONTAINMENT"
	ContainCgroup = "cgroup"
	ContainPidns  = "pidns"
	ContainPgroup = "pgroup"
)

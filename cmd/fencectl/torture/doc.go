// Package torture is fencectl's torture suite: it drives the real fencectl
// binary, as agents and operators would, through what breaks other task
// queues, and checks that no lease is ever honoured twice.
//
// # Parts
//
// Kill storm (storm_test.go), every crash point (crash_test.go), a
// linearizability check of a recorded history with porcupine
// (linear_test.go, the model in package model), a paused holder
// (pause_test.go), a full disk (disk_test.go), a stuck lock (lock_test.go),
// journal damage and loss (damage_test.go), hostile trees and inputs
// (hostile_test.go), process trees under `fencectl run` (proctree_test.go)
// and reserved words as task ids (reserved_test.go).
// What they share is in helpers_test.go, and what they share with
// cmd/fencectl's own tests (the tree on a test clock, process checks, the
// reserved-id steps) in package clitest.
//
// # Running it
//
// TestMain builds cmd/fencectl once, with this test binary's build tags and
// race detector, and every test runs that binary. The parts that need the
// test hooks (crash points, the settable clock) carry the fencetest build
// tag, so a plain `go test ./...` runs the others and `make test` runs all
// of them, small. `make torture` (cmd/torturereport) runs them at full size
// with FENCE_TORTURE=full, collects one JSON object per part in the file
// FENCE_TORTURE_REPORT names, and renders them into docs/RELIABILITY.md.
// FENCE_TORTURE_SCALE=N (a percentage) scales the full size for quick
// experiments.
//
// The package has no code of its own: only this documentation and tests.
package torture

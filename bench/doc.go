// Package bench holds fencectl's benchmarks: fencectl against the patterns
// people use today and against the disk's and the machine's own limits, all
// in one run on one file system. `make bench` runs them and regenerates
// docs/BENCHMARKS.md with bench/report; they never run in `make test`
// (TestMain builds nothing unless -test.bench is set, and there are no
// tests here).
//
//	go test -tags urfave_cli_no_docs -run '^$' -bench . -benchtime 1x ./bench/
//
// Each benchmark does a fixed batch of work per b.N and overrides ns/op with
// the time per claim, so -benchtime 1x (one batch) is the intended setting;
// -count N gives benchstat N samples (make bench: BENCH_COUNT, default 3,
// and the report takes the median of each figure). The metrics (claims/s,
// p50-ms, p99-ms, x-floor, other-cpu-pct) are described in stats_test.go.
//
// Files:
//
//	floor_test.go     the fdatasync and rename floors, the hello-world ceiling,
//	                  and a bare durable claim (testdata/bareclaim) run like
//	                  fencectl claim
//	cli_test.go       claim + complete through the release binary (the
//	                  front, whose steps go to the tree's daemon: its CPU
//	                  counts); the FENCE_LOCK_MODE=bbolt variant; claims
//	                  alone at 8 procs through the front, fencectl-full
//	                  and a plain build
//	library_test.go   claim + complete through the Go API, 1 and 16 goroutines
//	baseline_test.go  bare rename; flock + JSON state file (in-process and one
//	                  process per step via BENCH_HELPER); the helper commands
//	scale_test.go     claim-next and status with 1k, 100k, 1M tasks
//	                  (BENCH_MAX_TASKS=N leaves out the sizes above N)
//	run_test.go       fencectl run: revoke to SIGTERM
//	tree_test.go      building trees fast (files + one replay commit)
//	backend_test.go   the etcd journal beside bbolt: library at 16
//	                  goroutines (and 16 racing clients: retries/claim), CLI
//	                  at 8 procs via fencectl-etcd and via fencectl
//	                  (both through the host's daemon, whose CPU counts),
//	                  a bbolt tree's start with fencectl-full and
//	                  fencectl-etcd
//	etcdbench/        the etcd side, in a process of its own (the etcd
//	                  member; the etcd library rows) so that this test
//	                  binary, which the baselines start per step, links no etcd
//	report/           the generator of docs/BENCHMARKS.md
package bench

// Package bench holds fencectl's benchmarks: `go test -bench . -run '^$'
// ./bench/` (or `make bench`). They never run in `make test`.
package bench

package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// benchOut is go test output with the CPU metrics of two rows that a
// target compares, and a row that has none.
const benchOut = `goos: linux
BenchmarkCLI_Claim/build=release/procs=8-2 	1	2312462 ns/op	432.4 claims/s	87.91 cpu-busy-pct	4.066 cpu-ms/op	18.70 p50-ms	31.25 p99-ms	1199 hello-runs/s	1.500 hello-cpu-ms	0.3606 x-hello
BenchmarkCeiling_DurableClaim/procs=8-2 	1	1860857 ns/op	537.4 claims/s	83.39 cpu-busy-pct	3.104 cpu-ms/op	15.17 p50-ms	24.35 p99-ms
BenchmarkFloor_Fdatasync-2 	1	100000 ns/op	0.1 p50-ms
ok  	github.com/fencectl/fencectl/bench	94.753s
`

func TestReportShowsTheCPUOfEachRow(t *testing.T) {
	r, err := parse(strings.NewReader(benchOut))
	if err != nil {
		t.Fatal(err)
	}
	var doc bytes.Buffer
	write(&doc, r, "", time.Unix(0, 0).UTC())
	out := doc.String()
	for _, want := range []string{
		// the results table: CPU ms and CPU busy of a row that has them
		"| `CLI_Claim/build=release/procs=8` | 432 claims/s | 18.7 | 31.2 | — | — | — | 4.07 | 88% |",
		// and dashes for one that has not
		"| `Floor_Fdatasync` |",
		// the targets: CPU per process against hello-world's
		"CPU per process: 4.07 ms a claim, 1.50 ms hello-world",
		// and CPU per cycle of both sides of a ratio
		"CPU per cycle: CLI_Claim/build=release/procs=8: 4.07 ms, CPU 88% busy; Ceiling_DurableClaim/procs=8: 3.10 ms, CPU 83% busy",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "| `Floor_Fdatasync` |") && !strings.Contains(line, "| — | — |") {
			t.Errorf("a row without CPU metrics shows figures: %s", line)
		}
	}
}

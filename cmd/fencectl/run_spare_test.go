package main

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"
)

func TestParsePressure(t *testing.T) {
	for _, tc := range []struct {
		in     string
		avg10  float64
		total  uint64
		parsed bool
	}{
		{"some avg10=12.50 avg60=1.00 avg300=0.00 total=570404643\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", 12.5, 570404643, true},
		{"full avg10=1.00 avg60=0.00 avg300=0.00 total=5\n", 0, 0, false},
		{"some avg10=x total=5\n", 0, 5, false},
		{"some avg10=1.0\n", 1, 0, false},
		{"", 0, 0, false},
	} {
		avg10, total, ok := parsePressure([]byte(tc.in))
		if ok != tc.parsed || (ok && (avg10 != tc.avg10 || total != tc.total)) {
			t.Errorf("parsePressure(%q) = %v, %v, %v; want %v, %v, %v", tc.in, avg10, total, ok, tc.avg10, tc.total, tc.parsed)
		}
	}
}

// The gauge judges by the pressure since its last sample, its first
// sample by the kernel's 10 s average, and without PSI by the core count.
func TestCPUGauge(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("one core: the gauge never finds one spare, by design")
	}
	psi := filepath.Join(t.TempDir(), "cpu")
	write := func(avg10 string, total int) {
		t.Helper()
		line := "some avg10=" + avg10 + " avg60=0.00 avg300=0.00 total=" + strconv.Itoa(total) + "\n"
		if err := os.WriteFile(psi, []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	g := &cpuGauge{path: psi, readable: true}
	write("80.00", 1_000_000)
	if g.Spare() {
		t.Error("first sample at avg10=80%: spare, want busy")
	}
	// 100 ms of which 10 ms waited: 10% pressure.
	g.at = time.Now().Add(-100 * time.Millisecond)
	write("80.00", 1_010_000)
	if !g.Spare() {
		t.Error("10% pressure since the last sample: busy, want spare")
	}
	// Within gaugeEvery the last answer stands, whatever the file says.
	write("0.00", 99_000_000)
	if !g.Spare() {
		t.Error("sampled again within gaugeEvery")
	}
	// 100 ms of which 90 ms waited: 90%.
	g.at = time.Now().Add(-100 * time.Millisecond)
	write("0.00", 1_100_000)
	g.waited = 1_010_000
	if g.Spare() {
		t.Error("90% pressure since the last sample: spare, want busy")
	}
	// Started after a busy spell: the first sample judges by the pressure
	// since the start (10 ms of 100 waited), not by the 10 s average.
	write("95.00", 5_000_000)
	started := startGauge(psi)
	if started.at.IsZero() || started.waited != 5_000_000 {
		t.Fatalf("startGauge: base %v, %d; want now, 5000000", started.at, started.waited)
	}
	started.at = time.Now().Add(-100 * time.Millisecond)
	write("95.00", 5_010_000)
	if !started.Spare() {
		t.Error("first sample, 10% pressure since the start (avg10 95%): busy, want spare")
	}
	none := &cpuGauge{path: filepath.Join(t.TempDir(), "absent"), readable: true}
	if !none.Spare() {
		t.Error("no PSI on a machine with several cores: busy, want spare")
	}
}

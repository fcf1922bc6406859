package main

import (
	"bytes"
	"os"
	"runtime"
	"strconv"
	"time"
)

// cpuGauge tells run --loop whether the machine has CPU to spare for
// settling one task beside the next task's command (see pipelineBelow).
// Overlap only pays when a core would otherwise sit idle: when the CPU is
// oversubscribed (many runners on few cores) nothing overlaps, and the
// task kept in hand is only extra work. It reads the kernel's CPU
// pressure (/proc/pressure/cpu, "some": the share of time some task
// waited for a CPU), at most every gaugeEvery; without it (kernels before
// 4.20, or PSI off) it assumes a second core is spare if there is one.
// Its first sample is the pressure since the runner started.
type cpuGauge struct {
	path     string
	at       time.Time // when the last sample was taken
	waited   uint64    // its "some total", µs
	spare    bool
	sampled  bool
	readable bool
}

// gaugeEvery is how often the gauge reads the pressure: often enough to
// follow runners starting and stopping, rarely enough to cost nothing per
// task.
const gaugeEvery = 100 * time.Millisecond

// sparePressure is the pressure below which the CPU counts as having room:
// a lone runner, its command and the settle beside it make some waiting
// themselves.
const sparePressure = 0.4

// testSpareCPU, set by the test build, forces the gauge's answer (ok:
// forced).
var testSpareCPU func() (spare, ok bool)

func newCPUGauge() *cpuGauge {
	return startGauge("/proc/pressure/cpu")
}

// startGauge reads path once, as the base of the first sample: the
// kernel's 10 s average says what the machine did before the runner
// started (a burst of other processes, say), and the first sample judges
// by the pressure since then instead.
func startGauge(path string) *cpuGauge {
	g := &cpuGauge{path: path, readable: true}
	if b, err := os.ReadFile(path); err == nil {
		if _, total, ok := parsePressure(b); ok {
			g.at, g.waited = time.Now(), total
		}
	}
	return g
}

// Spare reports whether a core is likely idle now.
func (g *cpuGauge) Spare() bool {
	if testSpareCPU != nil {
		if spare, ok := testSpareCPU(); ok {
			return spare
		}
	}
	now := time.Now()
	if g.sampled && now.Sub(g.at) < gaugeEvery {
		return g.spare
	}
	g.sampled = true
	if !g.readable {
		return g.spare
	}
	b, err := os.ReadFile(g.path)
	avg10, total, ok := parsePressure(b)
	if err != nil || !ok {
		g.readable = false
		g.spare = runtime.GOMAXPROCS(0) > 1
		return g.spare
	}
	pressure := avg10 / 100 // no base to judge from: the kernel's 10 s average
	if !g.at.IsZero() && total >= g.waited {
		if span := now.Sub(g.at); span > 0 {
			pressure = float64(total-g.waited) / float64(span.Microseconds())
		}
	}
	g.at, g.waited = now, total
	g.spare = pressure < sparePressure && runtime.GOMAXPROCS(0) > 1
	return g.spare
}

// parsePressure reads the "some" line of a PSI file: its avg10 (percent)
// and total (µs).
func parsePressure(b []byte) (avg10 float64, total uint64, ok bool) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	fields := bytes.Fields(line)
	if len(fields) == 0 || string(fields[0]) != "some" {
		return 0, 0, false
	}
	var haveAvg, haveTotal bool
	for _, f := range fields[1:] {
		k, v, _ := bytes.Cut(f, []byte("="))
		var err error
		switch string(k) {
		case "avg10":
			avg10, err = strconv.ParseFloat(string(v), 64)
			haveAvg = err == nil
		case "total":
			total, err = strconv.ParseUint(string(v), 10, 64)
			haveTotal = err == nil
		}
	}
	return avg10, total, haveAvg && haveTotal
}

package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencectl/fencectl/fence"
)

// powerLossUndone is how many claims' renames each simulated power loss
// takes back.
const powerLossUndone = 100

// BenchmarkPowerLoss_Reconcile is the first write after a reboot on a
// tree of 1k, 100k and 1M tasks, after a power loss took back the renames
// of 100 claims (their files moved back to available/ by hand): the
// reconcile that puts every task file where the journal says, the sweep
// of the old boot's leases, and the reap itself. The boot is a fake one
// (fence.Options.Boot), a new id for each run; the tree goes back to
// this host's boot, untimed, when the row ends.
func BenchmarkPowerLoss_Reconcile(b *testing.B) {
	for _, size := range scaleSizes() {
		b.Run("tasks="+sizeName(size), func(b *testing.B) {
			st := getScaleTree(b, size)
			st.ensureReady(b, powerLossUndone+10)
			ctx := context.Background()
			var lats []time.Duration
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				tree, err := fence.Open(st.dir, fence.Options{})
				if err != nil {
					b.Fatal(err)
				}
				for range powerLossUndone {
					c, err := tree.Claim(ctx, fence.ClaimRequest{Agent: "before-power-loss"})
					if err != nil {
						b.Fatal(err)
					}
					// The power loss: the rename never reached the disk.
					if err := os.Rename(filepath.Join(st.dir, "claimed", c.Task.ID), filepath.Join(st.dir, "available", c.Task.ID)); err != nil {
						b.Fatal(err)
					}
				}
				tree.Close()
				boot := fakeBoot(fmt.Sprintf("bench-boot-%d-%d", os.Getpid(), i))
				b.StartTimer()
				d, err := timed(func() error {
					t, err := fence.Open(st.dir, fence.Options{Boot: boot})
					if err != nil {
						return err
					}
					defer t.Close()
					_, err = t.Reap(ctx, false)
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
				lats = append(lats, d)
			}
			b.StopTimer()
			restoreBoot(b, st.dir)
			b.ReportMetric(ms(median(lats)), "p50-ms")
			b.ReportMetric(powerLossUndone, "files-moved")
			reportBuild(b, st)
		})
	}
}

// fakeBoot is a boot clock of another boot id that began when this host's
// boot did.
func fakeBoot(id string) fence.BootClock {
	return func() (string, time.Duration, error) {
		_, since, err := fence.SystemBootClock()
		return id, since, err
	}
}

// restoreBoot hands the tree back to this host's boot: one write, so that
// the next benchmark's first write does not pay the reconcile.
func restoreBoot(b *testing.B, dir string) {
	b.Helper()
	t, err := fence.Open(dir, fence.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer t.Close()
	if _, err := t.Reap(context.Background(), false); err != nil {
		b.Fatal(err)
	}
}

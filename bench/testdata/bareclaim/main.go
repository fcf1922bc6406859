// Command bareclaim is the least that any one-process-per-claim tool must
// do to make a claim durable, and nothing else: take a lock, write one
// journal page and sync it, write the commit record and sync it (a
// copy-on-write journal's two syncs), rename the task file and fsync both
// directories. No parsing, no lease, no token check, no index.
//
// The benchmarks run it 8 ways at once, like `fencectl claim`, to show how
// close a durable CLI can come to the hello-world process-start ceiling on
// this machine. Usage: bareclaim DIR, where DIR holds lock, journal (at
// least 4 MiB), available/t<n> and claimed/.
package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"syscall"
)

func main() {
	if err := claim(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "bareclaim:", err)
		os.Exit(1)
	}
}

func claim(dir string) error {
	lock, err := os.OpenFile(dir+"/lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	journal, err := os.OpenFile(dir+"/journal", os.O_RDWR, 0)
	if err != nil {
		return err
	}
	page := make([]byte, 4096)
	if _, err := journal.ReadAt(page, 0); err != nil {
		return err
	}
	n := binary.LittleEndian.Uint64(page)
	// The data page, then the commit record that points at it.
	if _, err := journal.WriteAt(page, int64(4096*(1+n%1000))); err != nil {
		return err
	}
	if err := syscall.Fdatasync(int(journal.Fd())); err != nil {
		return err
	}
	binary.LittleEndian.PutUint64(page, n+1)
	if _, err := journal.WriteAt(page, 0); err != nil {
		return err
	}
	if err := syscall.Fdatasync(int(journal.Fd())); err != nil {
		return err
	}
	name := fmt.Sprintf("t%07d", n)
	if err := os.Rename(dir+"/available/"+name, dir+"/claimed/"+name); err != nil {
		return err
	}
	for _, d := range []string{"/claimed", "/available"} {
		f, err := os.Open(dir + d)
		if err != nil {
			return err
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return err
		}
	}
	fmt.Printf("FENCE_TASK=%s\n", name)
	return nil
}

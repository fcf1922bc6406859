package journal

import (
	"os"
	"sync"
	"syscall"
)

// CeilingCache is what a long-lived handle last read of the token
// ceiling's files, kept while the files stay the same: every write
// compares its journal with the files' witness (LostTokens), and reading
// two files for every group commit would cost more than the check is
// worth, while a stat of each costs a microsecond. The files are replaced
// whole by every write (writeCeilingFile renames a new file in), so a
// file with the same inode, size and modification time holds what was
// read. The zero CeilingCache is empty. It is safe for concurrent use.
type CeilingCache struct {
	mu      sync.Mutex
	valid   bool
	stamps  [2]fileStamp
	ceiling uint64
	witness Witness
	found   bool
}

// fileStamp tells one state of a file from another: missing, or an inode
// with a size and a modification time.
type fileStamp struct {
	exists      bool
	dev, ino    uint64
	size, mtime int64
	mode        os.FileMode
}

func stampOf(path string) fileStamp {
	fi, err := os.Lstat(path)
	if err != nil {
		return fileStamp{}
	}
	s := fileStamp{exists: true, size: fi.Size(), mtime: fi.ModTime().UnixNano(), mode: fi.Mode()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.dev, s.ino = uint64(st.Dev), st.Ino
	}
	return s
}

// Read is ReadCeilingWitness of dir, from the cache when neither file
// changed since the last read. A read that failed is not kept.
func (c *CeilingCache) Read(dir string) (ceiling uint64, w Witness, found bool, err error) {
	paths := CeilingPaths(dir)
	var stamps [2]fileStamp
	for i, p := range paths {
		stamps[i] = stampOf(p)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.valid && stamps == c.stamps {
		return c.ceiling, c.witness, c.found, nil
	}
	ceiling, w, found, err = ReadCeilingWitness(dir)
	c.valid = err == nil
	c.stamps, c.ceiling, c.witness, c.found = stamps, ceiling, w, found
	return ceiling, w, found, err
}

// Forget empties the cache: the next Read reads the files.
func (c *CeilingCache) Forget() {
	c.mu.Lock()
	c.valid = false
	c.mu.Unlock()
}

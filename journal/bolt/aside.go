package bolt

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// Damaged journals. recover rebuilds a journal that cannot be read; the
// damaged file is never deleted but kept aside under a name of its own, and
// the tokens it may have issued still count when the new journal picks its
// first token.

// damagedSuffix names a journal that setAside kept.
const damagedSuffix = ".damaged-"

// setAside renames the journal of dir to journal.db.damaged-<now>, never
// over an existing file, and fsyncs dir, so that a new journal can be
// created in its place. It returns the new path, or "" if dir holds no
// journal file. The caller holds .fence/lock.
func setAside(dir string, now time.Time) (string, error) {
	path := Path(dir)
	if _, err := os.Lstat(path); err != nil {
		return "", nil
	}
	// Two recovers in one second (the second finishing one cut short)
	// keep theirs under numbered names.
	base := path + damagedSuffix + now.UTC().Format("20060102T150405Z")
	aside := base
	for n := 2; ; n++ {
		err := renameNoReplace(path, aside)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) || n > 1000 {
			return "", fmt.Errorf("keep the damaged journal aside as %s: %w", aside, err)
		}
		aside = fmt.Sprintf("%s.%d", base, n)
	}
	if err := fsyncPath(dir); err != nil {
		return "", err
	}
	return aside, nil
}

// salvageTokens returns the highest token that the journal file of dir and
// every copy setAside kept there can have issued, however damaged (see
// SalvageToken); ok is false if none of them shows one.
func salvageTokens(dir string) (token uint64, ok bool) {
	olds, _ := filepath.Glob(filepath.Join(dir, FileName+damagedSuffix+"*"))
	for _, p := range append(olds, Path(dir)) {
		if tok, found := SalvageToken(p); found && (!ok || tok > token) {
			token, ok = tok, true
		}
	}
	return token, ok
}

package fence

import (
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/fencectl/fencectl/fsmirror"
	"github.com/fencectl/fencectl/journal"
	boltstore "github.com/fencectl/fencectl/journal/bolt"
)

// A directory of a tree is never a tree's root. An agent that changed
// into claimed/ to read its task and ran fencectl there was told "no
// journal: run `fencectl init` to make a task tree there"; following that
// advice made a second tree among the first one's tasks (its directories
// and .fence became "invalid entries" of available/, and inbox/ or out/
// would have been read as tasks or outputs). Commands on such a root now
// name the tree it is in, and init and recover refuse it.

// treeDirs are the directories of a tree, directly below its root: what
// must never hold another tree.
var treeDirs = append(slices.Clone(fsmirror.StateDirs), fsmirror.Inbox, fsmirror.Out, fsmirror.Meta)

// insideTree returns a refusal if root lies in one of the directories of
// a task tree above it (the nearest tree up the path decides; a tree in
// some other subdirectory of a tree's root is left alone), else nil.
//
// It looks along the path as given and along the path its symlinks lead
// to: a link to another tree's available/ is inside that tree all the
// same (and `cd link` gives a working directory that names the link).
func insideTree(root string) error {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil
	}
	if err := insideTreeAt(abs, abs); err != nil {
		return err
	}
	if real := realPath(abs); real != abs {
		return insideTreeAt(abs, real)
	}
	return nil
}

// insideTreeAt is insideTree for path, which names the root abs (itself,
// or what its symlinks lead to).
func insideTreeAt(abs, path string) error {
	shown := abs
	if path != abs {
		shown = abs + " (" + path + " once its symlinks are followed)"
	}
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		if hasJournal(dir) {
			rel, err := filepath.Rel(dir, path)
			if err != nil {
				return nil
			}
			first, _, _ := strings.Cut(rel, string(filepath.Separator))
			for _, d := range treeDirs {
				if first == string(d) {
					return invalidf(InputRoot, RuleInsideTree, abs, "%s is inside %s/ of the task tree %s, not a tree of its own; nothing changed. Run fencectl at the tree's root: --dir %s (or FENCE_DIR=%s)", shown, d, dir, dir, dir)
				}
			}
			return nil
		}
		if dir == filepath.Dir(dir) {
			return nil
		}
	}
}

// realPath is abs with the symlinks of its longest existing part
// followed (a root init is to make may not exist yet).
func realPath(abs string) string {
	rest := ""
	for p := abs; ; p = filepath.Dir(p) {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(r, rest)
		}
		if p == filepath.Dir(p) {
			return abs
		}
		rest = filepath.Join(filepath.Base(p), rest)
	}
}

// hasJournal reports whether dir is a tree's root: its .fence holds a
// bbolt journal or the config of another store.
func hasJournal(dir string) bool {
	meta := filepath.Join(dir, string(fsmirror.Meta))
	for _, name := range []string{boltstore.FileName, journal.ConfigName} {
		if _, err := os.Lstat(filepath.Join(meta, name)); err == nil {
			return true
		}
	}
	return false
}

package fsmirror

import (
	"fmt"
	"strings"
	"time"
)

// Quarantine moves the regular file name out of dir into .fence/quarantine,
// under a name that says where it came from and when, and returns that
// name. replay uses it for a second copy of a task: nothing is deleted, and
// the state directories hold one copy of each task again.
func (m *Mirror) Quarantine(dir Dir, name string) (string, error) {
	if err := validComponent(name, "file name"); err != nil {
		return "", err
	}
	dst := fmt.Sprintf("%s.%d.%s", time.Now().UTC().Format("20060102T150405"), time.Now().UnixNano()%1e9, name)
	if dir != Inbox {
		// ".fence/tmp" must not put a slash in the name.
		dst = fmt.Sprintf("%s.%s", strings.ReplaceAll(strings.TrimPrefix(string(dir), "."), "/", "-"), dst)
	}
	if err := m.move(dir, name, Quarantine, dst); err != nil {
		return "", fmt.Errorf("quarantine %s: %w", m.Path(dir, name), err)
	}
	return dst, nil
}

package etcdtest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/snapshot"
	utilsnapshot "go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
)

// Backups, as operators take and restore them: `etcdctl snapshot save`
// from one member, and `etcdutl snapshot restore` of every member's data
// directory from it. A restored cluster holds the snapshot's keys at the
// snapshot's revision (or further on, with a bump), under a new raft log.

// Snapshot saves a backup of the cluster's data to path, read from its
// first member.
func (c *Cluster) Snapshot(path string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := snapshot.SaveWithVersion(ctx, zap.NewNop(), clientv3.Config{Endpoints: c.Endpoints()[:1], DialTimeout: 5 * time.Second}, path)
	return err
}

// Restore stops every member and brings the cluster back from the backup
// at path, on the same addresses. bump > 0 moves the revision on by bump
// and marks the old ones compacted (etcdutl's --bump-revision
// --mark-compacted, which etcd advises for restores).
func (c *Cluster) Restore(path string, bump uint64) error {
	c.Stop()
	var initial []string
	for _, m := range c.members {
		initial = append(initial, m.Name+"=http://"+m.peerURL)
	}
	for _, m := range c.members {
		if err := os.RemoveAll(m.dir); err != nil {
			return err
		}
		err := utilsnapshot.NewV3(zap.NewNop()).Restore(utilsnapshot.RestoreConfig{
			SnapshotPath:        path,
			Name:                m.Name,
			OutputDataDir:       m.dir,
			PeerURLs:            []string{"http://" + m.peerURL},
			InitialCluster:      strings.Join(initial, ","),
			InitialClusterToken: "fencectl-test",
			RevisionBump:        bump,
			MarkCompacted:       bump > 0,
		})
		if err != nil {
			return fmt.Errorf("restore etcd member %s: %w", m.Name, err)
		}
	}
	errs := make(chan error, len(c.members))
	for _, m := range c.members {
		go func() { errs <- m.Start() }()
	}
	for range c.members {
		if err := <-errs; err != nil {
			return err
		}
	}
	return nil
}

package main

// The test binary is the fencectl the scripts run: it links the etcd
// backend, as fencectl-etcd does, so that the scripts' etcd trees are
// served in-process rather than handed to another binary.
import _ "github.com/fencectl/fencectl/journal/etcd"

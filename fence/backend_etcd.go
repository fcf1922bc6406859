//go:build etcd

package fence

// Built with -tags etcd (the fencectl-etcd binary), fence links the etcd
// backend; without the tag the etcd client's start-up cost (about 2 ms of
// package initialisers) stays out of every bbolt command. A library user
// who wants etcd trees imports journal/etcd (or builds with the tag).
import _ "github.com/fencectl/fencectl/journal/etcd"

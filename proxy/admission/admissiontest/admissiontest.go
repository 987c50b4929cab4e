// Package admissiontest runs a test against both admission stores: this
// process's memory and a real redis-server started for the test.
package admissiontest

import (
	"testing"
	"time"

	"github.com/prestroid/prestroid/proxy/admission"
	"github.com/prestroid/prestroid/testing/redistest"
)

// Backend is where admission keeps its state in a test: this process's
// memory, or a real redis-server started for the test.
type Backend struct {
	Name  string
	Redis func(t *testing.T) *admission.RedisOptions // nil: memory
}

// Backends are the stores every admission behaviour is tested against.
var Backends = []Backend{
	{Name: "memory"},
	{Name: "redis", Redis: func(t *testing.T) *admission.RedisOptions {
		srv := redistest.Start(t) // skips without redis-server
		return &admission.RedisOptions{URL: "redis://" + srv.Addr, Lease: 3 * time.Second}
	}},
}

// ForEach runs fn against both stores: the same behaviour is
// expected of each.
func ForEach(t *testing.T, fn func(t *testing.T, b Backend, a func(admission.Options) *admission.Options)) {
	for _, b := range Backends {
		t.Run(b.Name, func(t *testing.T) {
			var r *admission.RedisOptions
			if b.Redis != nil {
				r = b.Redis(t)
			}
			fn(t, b, func(o admission.Options) *admission.Options {
				if r != nil {
					rc := *r
					o.Redis = &rc
				}
				return &o
			})
		})
	}
}

// Shared is o with its budgets in srv, as two replicas share them.
func Shared(srv *redistest.Server, lease time.Duration, o admission.Options) *admission.Options {
	o.Redis = &admission.RedisOptions{URL: "redis://" + srv.Addr, Lease: lease, Replicas: 2}
	return &o
}

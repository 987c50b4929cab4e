//go:build unix

package featurize

import (
	"syscall"
	"time"
)

// processCPU is the user+system CPU time of the process so far (GC workers
// included): benchmarks report it per op because wall time is meaningless
// on a shared, overloaded machine.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

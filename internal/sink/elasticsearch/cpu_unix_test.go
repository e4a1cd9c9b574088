//go:build unix

package elasticsearchsink

import (
	"syscall"
	"time"
)

// selfCPU is this process's user and system CPU time in seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru) // cannot fail for RUSAGE_SELF
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

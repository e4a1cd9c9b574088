//go:build unix

package essink

import (
	"syscall"
	"time"
)

// selfCPU is this process's user and system CPU time in seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

//go:build unix

package interceptor

import "syscall"

// processCPU returns the CPU time (user and system) the process has used,
// in nanoseconds. Benchmarks report it per event besides the wall time,
// because on a shared machine the wall time counts the waits for a CPU.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

package memorychannel

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// availableMemory returns the machine's memory, or the cgroup v2 memory
// limit when lower, in bytes; 0 when unknown.
func availableMemory() uint64 {
	var si syscall.Sysinfo_t
	var total uint64
	if syscall.Sysinfo(&si) == nil {
		total = uint64(si.Totalram) * uint64(si.Unit)
	}
	if b, err := os.ReadFile("/sys/fs/cgroup/memory.max"); err == nil {
		if lim, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && lim > 0 && (total == 0 || lim < total) {
			total = lim
		}
	}
	return total
}

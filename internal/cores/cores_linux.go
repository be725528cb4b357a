package cores

import (
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Now reads the clock ticks so far of the cores the process may run on
// (its affinity), from /proc/stat; false: they could not be read.
func Now() (Ticks, bool) {
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) != nil {
		return Ticks{}, false
	}
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return Ticks{}, false
	}
	return Sum(stat, set.IsSet), true
}

// CPU is the CPU time the process has used, its own and the kernel's for
// it (0: it could not be read).
func CPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

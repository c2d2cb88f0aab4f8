package kernelprofile

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// onlineCPUsPath lists the CPUs the kernel runs ("0-3,6").
const onlineCPUsPath = "/sys/devices/system/cpu/online"

// onlineCPUs is the machine's online CPUs: from sysfs, or, where it is not
// mounted, 0 to runtime.NumCPU()-1 (which counts only the CPUs this
// process may run on, but a profile of the whole machine needs the
// privileges that usually come with all of them).
func onlineCPUs() ([]int, error) {
	b, err := os.ReadFile(onlineCPUsPath)
	if os.IsNotExist(err) {
		cpus := make([]int, runtime.NumCPU())
		for i := range cpus {
			cpus[i] = i
		}
		return cpus, nil
	}
	if err != nil {
		return nil, err
	}
	return parseCPUList(strings.TrimSpace(string(b)))
}

// parseCPUList reads the kernel's CPU list format: comma-separated CPUs
// and inclusive ranges ("0-3,6,8-9").
func parseCPUList(s string) ([]int, error) {
	var cpus []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := strconv.Atoi(lo)
		last := first
		if err == nil && isRange {
			last, err = strconv.Atoi(hi)
		}
		if err != nil || first < 0 || last < first {
			return nil, fmt.Errorf("CPU list %q: %q is no CPU or range", s, part)
		}
		for c := first; c <= last; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

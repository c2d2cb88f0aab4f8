package test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of /proc's CPU times (USER_HZ, 100 on every Linux
// architecture Polis runs on).
const userHZ = 100

// cpuSample is the host's CPU time so far, and each of a cluster's qemu
// processes', in ticks of userHZ, at one moment.
type cpuSample struct {
	at         time.Time
	host, busy uint64            // every CPU's ticks; those not idle
	vms        map[string]uint64 // by VM name
}

// sampleCPU reads the host's CPU times and those of the qemu processes
// whose command line names a disk under dir/NAME/ for each of names (so
// that another cluster's machines on the same host are not counted).
func sampleCPU(dir string, names []string) (cpuSample, error) {
	s := cpuSample{at: time.Now(), vms: map[string]uint64{}}
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s, err
	}
	line, _, _ := strings.Cut(string(stat), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return s, fmt.Errorf("/proc/stat begins %q: want the cpu line", line)
	}
	for i, v := range f[1:] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return s, fmt.Errorf("/proc/stat's cpu line %q: %w", line, err)
		}
		s.host += n
		if i != 3 && i != 4 { // idle, iowait
			s.busy += n
		}
	}
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, path := range cmdlines {
		b, err := os.ReadFile(path)
		if err != nil || !strings.Contains(string(b), "qemu-system") {
			continue // gone meanwhile, or not a machine
		}
		for _, name := range names {
			if !strings.Contains(string(b), filepath.Join(dir, name)+"/") {
				continue
			}
			st, err := os.ReadFile(filepath.Join(filepath.Dir(path), "stat"))
			if err != nil {
				continue
			}
			// After the command's name in parentheses: state is the
			// first field, utime the 12th, stime the 13th.
			_, rest, ok := strings.Cut(string(st), ") ")
			fields := strings.Fields(rest)
			if !ok || len(fields) < 13 {
				return s, fmt.Errorf("%s: %q is no process status", filepath.Dir(path), st)
			}
			u, _ := strconv.ParseUint(fields[11], 10, 64)
			k, _ := strconv.ParseUint(fields[12], 10, 64)
			s.vms[name] += u + k
		}
	}
	return s, nil
}

// since says how busy the host's CPUs and each VM's qemu were between
// before and s, in percent of one core: "host 196% of 2 cores, node1 55%,
// ...". A machine missing from either sample, or whose qemu was started
// again between them (its time went back), is "not running throughout".
func (s cpuSample) since(before cpuSample, names []string) string {
	secs := s.at.Sub(before.at).Seconds()
	if secs <= 0 || s.host <= before.host {
		return "no time passed"
	}
	cores := float64(s.host-before.host) / userHZ / secs
	parts := []string{fmt.Sprintf("host %.0f%% of %.0f cores", 100*cores*float64(s.busy-before.busy)/float64(s.host-before.host), cores)}
	for _, name := range names {
		a, okA := before.vms[name]
		b, okB := s.vms[name]
		if !okA || !okB || b < a {
			parts = append(parts, name+" not running throughout")
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.0f%%", name, 100*float64(b-a)/userHZ/secs))
	}
	return strings.Join(parts, ", ")
}

package kernelprofile

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ringPages is each CPU's ring buffer in pages (a power of two, as the
// kernel wants): 256 KiB, 16,384 samples of 16 bytes.
const ringPages = 64

// Sampler is a profile being taken: one cpu-clock event per CPU, each
// with its ring. Stop it to read the profile; a Sampler is used once.
type Sampler struct {
	fds   []int
	rings [][]byte
}

// Start samples every online CPU rate times a second. Each sample is an
// interrupt, which costs the profiled work some CPU, more of it on an
// emulated CPU; at 250 a second clusternet's lab in a VM under TCG was
// no slower than without a profile, run for run (docs/benchmarks.md).
// The kernel lowers a rate it cannot keep up with.
func Start(rate int) (*Sampler, error) {
	if rate <= 0 {
		return nil, fmt.Errorf("kernelprofile: rate %d: want samples per second above 0", rate)
	}
	// The symbols are read at Stop, which sees modules loaded
	// meanwhile; a table that cannot be read fails here, before any
	// sampling.
	if _, err := loadSymbols(); err != nil {
		return nil, fmt.Errorf("kernelprofile: reading the kernel's symbols: %w", err)
	}
	cpus, err := onlineCPUs()
	if err != nil {
		return nil, fmt.Errorf("kernelprofile: the online CPUs: %w", err)
	}
	s := &Sampler{}
	for _, cpu := range cpus {
		if err := s.open(cpu, rate); err != nil {
			s.close()
			return nil, err
		}
	}
	for i, fd := range s.fds {
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
			s.close()
			return nil, fmt.Errorf("kernelprofile: enabling CPU %d's event: %w", cpus[i], err)
		}
	}
	return s, nil
}

// open adds cpu's event and its ring.
func (s *Sampler) open(cpu, rate int) error {
	attr := unix.PerfEventAttr{
		Type:        unix.PERF_TYPE_SOFTWARE,
		Config:      unix.PERF_COUNT_SW_CPU_CLOCK,
		Sample:      uint64(rate),
		Sample_type: unix.PERF_SAMPLE_IP,
		Bits:        unix.PerfBitFreq | unix.PerfBitDisabled,
	}
	attr.Size = uint32(unsafe.Sizeof(attr))
	fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
			return fmt.Errorf("kernelprofile: opening CPU %d's event: %w (the whole machine's events need CAP_PERFMON or CAP_SYS_ADMIN)", cpu, err)
		}
		return fmt.Errorf("kernelprofile: opening CPU %d's event: %w", cpu, err)
	}
	ring, err := unix.Mmap(fd, 0, (1+ringPages)*os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return fmt.Errorf("kernelprofile: mapping CPU %d's ring: %w", cpu, err)
	}
	s.fds = append(s.fds, fd)
	s.rings = append(s.rings, ring)
	return nil
}

// Stop ends the sampling and names the samples.
func (s *Sampler) Stop() (*Profile, error) {
	defer s.close()
	for _, fd := range s.fds {
		unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_DISABLE, 0)
	}
	syms, err := loadSymbols()
	if err != nil {
		return nil, fmt.Errorf("kernelprofile: reading the kernel's symbols: %w", err)
	}
	p := &Profile{Functions: map[string]int{}}
	page := os.Getpagesize()
	for _, ring := range s.rings {
		meta := (*unix.PerfEventMmapPage)(unsafe.Pointer(&ring[0]))
		head := atomic.LoadUint64(&meta.Data_head)
		ips, lost := readRing(ring[page:], head, meta.Data_tail)
		p.Lost += lost
		p.Samples += len(ips)
		for _, ip := range ips {
			p.Functions[syms.name(ip)]++
		}
	}
	return p, nil
}

// close unmaps the rings and closes the events.
func (s *Sampler) close() {
	for _, r := range s.rings {
		unix.Munmap(r)
	}
	for _, fd := range s.fds {
		unix.Close(fd)
	}
	s.rings, s.fds = nil, nil
}

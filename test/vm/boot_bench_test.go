package vm_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/polis-os/polis/launch"
	"github.com/polis-os/polis/launch/image"
)

// BenchmarkBoot measures, in turns so that both see the same load, one VM
// from its qemu start to its curator serving (the cluster bootstrapped,
// ownership taken) and three VMs from the first qemu start to all UP and
// healthy with three consensus members running curators (Launch's
// "cluster ready"), and reports their ratio, the figure issue 24 sets a
// goal for. The times come from the launcher's own steps, stamped as they
// are printed. The image is built from this tree into its own output
// directory (out-bench-boot).
//
//	go test -run '^$' -bench Boot -benchtime 3x -timeout 60m ./test/vm/
func BenchmarkBoot(b *testing.B) {
	needQEMU(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	img, err := image.Build(ctx, image.Config{
		SourceDir: "../..", Progress: benchLog{b},
		OutDir: filepath.Join(cacheDir(b), "polis", "image", "out-bench-boot"),
	})
	if err != nil {
		b.Fatal(err)
	}
	var one, three []time.Duration
	for i := range b.N {
		one = append(one, bootSteps(ctx, b, img, 1, "node 1 (10.77.0.1): curator serving"))
		three = append(three, bootSteps(ctx, b, img, 3, "cluster ready"))
		fmt.Fprintf(os.Stderr, "round %d: one VM to its curator serving %v; three VMs to all UP and healthy, three members %v (%.2f×); load average %s\n",
			i+1, one[i].Round(10*time.Millisecond), three[i].Round(10*time.Millisecond), three[i].Seconds()/one[i].Seconds(), loadAverage())
	}
	var s1, s3 time.Duration
	for i := range one {
		s1 += one[i]
		s3 += three[i]
	}
	b.ReportMetric(s1.Seconds()/float64(len(one)), "s/one-vm-serving")
	b.ReportMetric(s3.Seconds()/float64(len(three)), "s/three-vms-whole")
	b.ReportMetric(s3.Seconds()/s1.Seconds(), "ratio")
}

// bootSteps launches n VMs, all consensus members, and returns the time
// from the first VM's qemu start ("started" step) to the step whose line
// starts with until.
func bootSteps(ctx context.Context, b *testing.B, img *image.Image, n int, until string) time.Duration {
	b.Helper()
	steps := &stampedSteps{}
	c, err := launch.Launch(ctx, launch.Options{
		Nodes:             n,
		ConsensusMembers:  true,
		LeaseTTL:          leaseTTL,
		HeartbeatInterval: heartbeatInterval,
		VM:                &launch.VMOptions{Image: img},
		StepTimeout:       4 * time.Minute,
		Progress:          steps,
		// POLIS_KEEP=1 keeps the consoles, whose host timestamps say
		// where a boot's time went.
		Keep: os.Getenv("POLIS_KEEP") != "",
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := c.Close(); err != nil {
		b.Errorf("closing the cluster: %v", err)
	}
	start, ok := steps.first(func(l string) bool { return strings.HasPrefix(l, "node 1 ") && strings.Contains(l, ": started (pid") })
	end, ok2 := steps.first(func(l string) bool { return strings.HasPrefix(l, until) })
	if !ok || !ok2 {
		b.Fatalf("no start or no %q among the launcher's steps:\n%s", until, steps)
	}
	// To stderr: a benchmark's log is cut short.
	fmt.Fprintf(os.Stderr, "%d VMs, the launcher's steps (load average %s):\n%s", n, loadAverage(), steps.since(start))
	return end.Sub(start)
}

// stampedSteps keeps the launcher's progress lines with when they came.
type stampedSteps struct {
	mu    sync.Mutex
	lines []string
	at    []time.Time
}

func (s *stampedSteps) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for l := range strings.SplitSeq(strings.TrimRight(string(p), "\n"), "\n") {
		s.lines = append(s.lines, l)
		s.at = append(s.at, now)
	}
	return len(p), nil
}

func (s *stampedSteps) first(match func(string) bool) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, l := range s.lines {
		if match(l) {
			return s.at[i], true
		}
	}
	return time.Time{}, false
}

// since lists the steps with their time since t.
func (s *stampedSteps) since(t time.Time) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out strings.Builder
	for i, l := range s.lines {
		fmt.Fprintf(&out, "  %6.2fs  %s\n", s.at[i].Sub(t).Seconds(), l)
	}
	return out.String()
}

func (s *stampedSteps) String() string { return s.since(time.Time{}) }

// loadAverage is the 1-, 5- and 15-minute load average.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

type benchLog struct{ b *testing.B }

func (l benchLog) Write(p []byte) (int, error) {
	l.b.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

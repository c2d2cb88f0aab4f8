package test

import (
	"strings"
	"testing"
	"time"
)

// TestCPUSince checks the figures of sampleCPU's samples, and that a
// machine that stopped or started again is named as such, not given a
// wrapped-around figure.
func TestCPUSince(t *testing.T) {
	t0 := time.Now()
	before := cpuSample{at: t0, host: 1000, busy: 400, vms: map[string]uint64{"node1": 100, "node2": 500, "node3": 50}}
	after := cpuSample{at: t0.Add(2 * time.Second), host: 1400, busy: 700, vms: map[string]uint64{"node1": 160, "node2": 20}}
	got := after.since(before, []string{"node1", "node2", "node3"})
	want := "host 150% of 2 cores, node1 30%, node2 not running throughout, node3 not running throughout"
	if got != want {
		t.Errorf("since = %q, want %q", got, want)
	}
	if got := before.since(before, nil); got != "no time passed" {
		t.Errorf("since itself = %q", got)
	}
	// This host's own /proc: a sample with time in it, no machines.
	s, err := sampleCPU(t.TempDir(), []string{"node1"})
	if err != nil || s.host == 0 || len(s.vms) != 0 {
		t.Fatalf("sampleCPU = %+v, %v; want the host's ticks and no machine", s, err)
	}
	if line := s.since(cpuSample{at: s.at.Add(-time.Second)}, []string{"node1"}); !strings.Contains(line, "node1 not running throughout") {
		t.Errorf("since with no machine: %q", line)
	}
}

package nodeapi

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The collector reports the tree's top two levels, each cgroup's CPU from
// cpu.stat's usage_usec in seconds and its memory where memory.current is
// there; deeper cgroups (the pods') and plain files are not series, and a
// cgroup whose files cannot be parsed is left out, not reported as zero.
func TestCgroupCollector(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"cpu.stat":                                   "usage_usec 999000000\n", // the root: the whole machine, not reported
		"cgroup.controllers":                         "cpu memory",
		"polis/cpu.stat":                             "usage_usec 3500000\nuser_usec 3000000\nsystem_usec 500000\n",
		"polis/memory.current":                       "104857600\n",
		"polis/agent/cpu.stat":                       "usage_usec 2000000\nuser_usec 1500000\nsystem_usec 500000\nnr_periods 0\n",
		"polis/agent/memory.current":                 "52428800\n",
		"kube-controlplane/cpu.stat":                 "usage_usec 1500000\n",
		"kube-controlplane/apiserver/cpu.stat":       "user_usec 1\nusage_usec 1250000\n",
		"kube-controlplane/scheduler/cpu.stat":       "usage_usec garbage\n",
		"kube-controlplane/scheduler/memory.current": "7\n",
		"kubernetes/kubepods/pod1/cpu.stat":          "usage_usec 1000000\n", // third level: the kubelet's to report
		"kubernetes/kubepods/cpu.stat":               "usage_usec 1000000\n",
	}
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// kubernetes/ has no cpu.stat of its own here: no series for it.
	want := `
# HELP polis_cgroup_cpu_seconds_total CPU time (user and system) of the processes in each cgroup of the node's top two levels and below it, from cpu.stat.
# TYPE polis_cgroup_cpu_seconds_total counter
polis_cgroup_cpu_seconds_total{cgroup="kube-controlplane"} 1.5
polis_cgroup_cpu_seconds_total{cgroup="kube-controlplane/apiserver"} 1.25
polis_cgroup_cpu_seconds_total{cgroup="kubernetes/kubepods"} 1
polis_cgroup_cpu_seconds_total{cgroup="polis"} 3.5
polis_cgroup_cpu_seconds_total{cgroup="polis/agent"} 2
# HELP polis_cgroup_memory_bytes Memory charged to each cgroup of the node's top two levels and below it (memory.current), where the memory controller is enabled for it.
# TYPE polis_cgroup_memory_bytes gauge
polis_cgroup_memory_bytes{cgroup="kube-controlplane/scheduler"} 7
polis_cgroup_memory_bytes{cgroup="polis"} 1.048576e+08
polis_cgroup_memory_bytes{cgroup="polis/agent"} 5.24288e+07
`
	if err := testutil.CollectAndCompare(&cgroupCollector{root: root}, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	// No tree at all (a development node given a path that is not there):
	// no series, no error.
	if n := testutil.CollectAndCount(&cgroupCollector{root: filepath.Join(root, "missing")}); n != 0 {
		t.Errorf("%d series from a missing tree, want none", n)
	}
}

func TestParseCPUStat(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		err  string
	}{
		{"usage_usec 42\nuser_usec 40\n", 42, ""},
		{"user_usec 40\nusage_usec 42", 42, ""},
		{"user_usec 40\n", 0, "no usage_usec"},
		{"usage_usec -1\n", 0, `usage_usec "-1"`},
		{"", 0, "no usage_usec"},
	} {
		got, err := parseCPUStat([]byte(tc.in))
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("parseCPUStat(%q) = %d, %v; want %d, an error with %q", tc.in, got, err, tc.want, tc.err)
		}
	}
}

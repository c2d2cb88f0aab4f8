package test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestCgroupCPUSince checks the controller's line by cgroup: shares of one
// CPU of the leaves only, sorted; a cgroup that appeared, vanished or
// started again named as such, not given a figure (least of all a negative
// one); no time, or no metric, said so.
func TestCgroupCPUSince(t *testing.T) {
	t0 := time.Now()
	before := cgroupCPUSample{at: t0, seconds: map[string]float64{
		"polis": 40, "polis/agent": 40, "kube-controlplane": 60, "kube-controlplane/apiserver": 50,
		"kube-controlplane/scheduler": 4, "kube-controlplane/controller-manager": 6, "kube-services": 10, "kube-services/dns": 10,
	}}
	after := cgroupCPUSample{at: t0.Add(4 * time.Second), seconds: map[string]float64{
		"polis": 43, "polis/agent": 41, "polis/new": 2, "kube-controlplane": 58.25, "kube-controlplane/apiserver": 51.25,
		"kube-controlplane/scheduler": 1, "kube-controlplane/controller-manager": 6, "kube-services": 0.5,
	}}
	got := after.since(before)
	want := "kube-controlplane/apiserver 31%, kube-controlplane/controller-manager 0%, " +
		"kube-controlplane/scheduler restarted meanwhile (its CPU time went back), kube-services/dns gone meanwhile, " +
		"polis/agent 25%, polis/new appeared meanwhile"
	if got != want {
		t.Errorf("since = %q\nwant    %q", got, want)
	}
	// A parent without children in either sample is a leaf.
	lone := cgroupCPUSample{at: t0.Add(2 * time.Second), seconds: map[string]float64{"kubernetes": 3}}
	if got := lone.since(cgroupCPUSample{at: t0, seconds: map[string]float64{"kubernetes": 1}}); got != "kubernetes 100%" {
		t.Errorf("since of a lone cgroup = %q, want kubernetes 100%%", got)
	}
	if got := before.since(before); got != "no time passed" {
		t.Errorf("since itself = %q", got)
	}
	if got := after.since(cgroupCPUSample{at: t0.Add(time.Minute), seconds: before.seconds}); got != "no time passed" {
		t.Errorf("since a later sample = %q", got)
	}
	empty := cgroupCPUSample{at: t0, seconds: map[string]float64{}}
	if got := (cgroupCPUSample{at: t0.Add(time.Second)}).since(empty); got != "no "+cgroupCPUMetric+" in its metrics" {
		t.Errorf("since with no metric = %q", got)
	}
}

// TestParseCgroupCPU checks the parser on /metrics as the Go client writes
// it, and that it refuses what it would misread.
func TestParseCgroupCPU(t *testing.T) {
	text := `# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines 312
# HELP polis_cgroup_cpu_seconds_total CPU time of each cgroup.
# TYPE polis_cgroup_cpu_seconds_total counter
polis_cgroup_cpu_seconds_total{cgroup="polis"} 1.234567e+06
polis_cgroup_cpu_seconds_total{cgroup="polis/agent"} 12.5
polis_cgroup_cpu_seconds_total{cgroup="odd\"name\\"} 0 1700000000000
polis_cgroup_cpu_seconds_total_created{cgroup="polis"} 1.7e+09
# TYPE polis_cgroup_memory_bytes gauge
polis_cgroup_memory_bytes{cgroup="polis/agent"} 1.048576e+08
`
	got, err := parseCgroupCPU(text)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"polis": 1234567, "polis/agent": 12.5, `odd"name\`: 0}
	if len(got) != len(want) {
		t.Errorf("parsed %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("parsed %v, want %v", got, want)
			break
		}
	}
	if got, err := parseCgroupCPU("go_goroutines 3\n"); err != nil || len(got) != 0 {
		t.Errorf("metrics without the counter: %v, %v; want none and no error", got, err)
	}
	for _, bad := range []string{
		`polis_cgroup_cpu_seconds_total 3`,
		`polis_cgroup_cpu_seconds_total{cgroup="polis",node="x"} 3`,
		`polis_cgroup_cpu_seconds_total{node="x",cgroup="polis"} 3`,
		`polis_cgroup_cpu_seconds_total{cgroup=""} 3`,
		`polis_cgroup_cpu_seconds_total{cgroup="polis} 3`,
		`polis_cgroup_cpu_seconds_total{cgroup="polis"} -1`,
		`polis_cgroup_cpu_seconds_total{cgroup="polis"} NaN`,
		`polis_cgroup_cpu_seconds_total{cgroup="polis"} +Inf`,
		`polis_cgroup_cpu_seconds_total{cgroup="polis"} 3 x`,
		`polis_cgroup_cpu_seconds_total{cgroup="polis"} 3 4 5`,
		"polis_cgroup_cpu_seconds_total{cgroup=\"polis\"} 3\npolis_cgroup_cpu_seconds_total{cgroup=\"polis\"} 4",
	} {
		if got, err := parseCgroupCPU(bad); err == nil {
			t.Errorf("parseCgroupCPU(%q) = %v, want an error", bad, got)
		}
	}
}

// TestCgroupCPUDuring checks the scrapes against a plain HTTP server (the
// mTLS is the node's, out of reach without a VM): a figure from two
// scrapes, all over one kept connection; a failed scrape, before or after,
// is a line saying so, and the measurement runs all the same.
func TestCgroupCPUDuring(t *testing.T) {
	var mu sync.Mutex // the handler's goroutines, and the test's reading conns
	var scrapes int
	conns := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		scrapes++
		conns[r.RemoteAddr] = true
		if scrapes == 4 {
			http.Error(w, "owner only", http.StatusForbidden)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		fmt.Fprintf(w, "# TYPE polis_cgroup_cpu_seconds_total counter\npolis_cgroup_cpu_seconds_total{cgroup=\"polis/agent\"} %d\n", scrapes)
	}))
	defer srv.Close()
	m := &nodeMetrics{url: srv.URL + "/metrics", client: &http.Client{Timeout: metricsTimeout}}
	defer m.close()
	ran := false
	line := cgroupCPUDuring(context.Background(), m, func() { ran = true })
	if !ran || !strings.HasPrefix(line, "polis/agent ") || !strings.HasSuffix(line, "%") {
		t.Errorf("cgroupCPUDuring = %q (ran %v), want polis/agent's share", line, ran)
	}
	ran = false
	line = cgroupCPUDuring(context.Background(), m, func() { ran = true })
	if want := "not read (after: scraping " + m.url + ": 403 Forbidden: owner only)"; !ran || line != want {
		t.Errorf("cgroupCPUDuring, refused after = %q (ran %v), want %q", line, ran, want)
	}
	mu.Lock()
	if len(conns) != 1 {
		t.Errorf("4 scrapes over %d connections, want one kept", len(conns))
	}
	mu.Unlock()

	failing := &nodeMetrics{err: errors.New("no controller")}
	ran = false
	if line := cgroupCPUDuring(context.Background(), failing, func() { ran = true }); !ran || line != "not read (before: no controller)" {
		t.Errorf("cgroupCPUDuring without a client = %q (ran %v)", line, ran)
	}
	srv.Close()
	ran = false
	if line := cgroupCPUDuring(context.Background(), m, func() { ran = true }); !ran || !strings.HasPrefix(line, "not read (before: scraping "+m.url+": ") {
		t.Errorf("cgroupCPUDuring with the server gone = %q (ran %v)", line, ran)
	}
}

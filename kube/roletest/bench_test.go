package roletest

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkRoleAddedToReady measures, on one node agent, the time from
// giving the node KubernetesController (the Management call) to its
// kubernetes worker reporting every component running and the apiserver
// ready (/readyz ok): the role reaches the node through the curator's
// Watch, the worker reads the PKI from etcd, issues the node's
// certificates, starts the confined etcd proxy and the three processes.
// Taking the role away again (until every process is gone) is not timed.
// It also reports each component's resident memory (VmRSS, in MB) and the
// CPU time it used (user and system, in seconds) at ready: the CPU time is
// what an idle machine would spend, whatever the load.
//
//	go test -run '^$' -bench RoleAddedToReady -benchtime 5x ./kube/roletest/
func BenchmarkRoleAddedToReady(b *testing.B) {
	c := startController(b)
	c.waitKube(b, "ready", ready)
	rss, cpu := map[string]float64{}, map[string]float64{}
	for b.Loop() {
		b.StopTimer()
		c.setRole(b, false)
		c.waitKube(b, "stopped", stopped)
		b.StartTimer()
		c.setRole(b, true)
		c.waitKube(b, "ready", ready)
		b.StopTimer()
		for name, pids := range c.processes(b) {
			for _, pid := range pids {
				rss[name] += vmRSS(pid)
				cpu[name] += cpuSeconds(pid)
			}
		}
		b.StartTimer()
	}
	for name, total := range rss {
		b.ReportMetric(total/float64(b.N), name+"-MB")
	}
	for name, total := range cpu {
		b.ReportMetric(total/float64(b.N), name+"-cpu-s")
	}
}

// cpuSeconds is the CPU time (user and system) process pid has used, 0 if
// unknown.
func cpuSeconds(pid int) float64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The fields after the command's closing parenthesis start with the
	// state (field 3); utime and stime are fields 14 and 15, in clock
	// ticks (100 per second on Linux).
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100
}

// vmRSS is the resident memory of process pid in MB, 0 if unknown.
func vmRSS(pid int) float64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(data)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

package nodeapi

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// What the node's programs cost, by cgroup. On a node image the agent is
// PID 1 and lays out the cgroup v2 tree (node/pid1): itself in polis/agent,
// each control-plane component in kube-controlplane/<component>, a
// worker's runtime, kubelet and pods in kubernetes/, its node services in
// kube-services/. process_cpu_seconds_total covers the agent alone (and
// its embedded etcd), not its children: on a controller the apiserver
// costs more than the agent. So /metrics also reports, for the tree's top
// two levels (the node's own programs; the pods' cgroups, deeper, are the
// kubelet's to report), each cgroup's CPU and memory. Two levels keep the
// series few and fixed by what the node runs, not by its workload.

var (
	cgroupCPUDesc = prometheus.NewDesc("polis_cgroup_cpu_seconds_total",
		"CPU time (user and system) of the processes in each cgroup of the node's top two levels and below it, from cpu.stat.", []string{"cgroup"}, nil)
	cgroupMemoryDesc = prometheus.NewDesc("polis_cgroup_memory_bytes",
		"Memory charged to each cgroup of the node's top two levels and below it (memory.current), where the memory controller is enabled for it.", []string{"cgroup"}, nil)
)

// cgroupDepth is how many levels below the root /metrics reports.
const cgroupDepth = 2

// cgroupCollector reads a cgroup v2 tree at scrape time.
type cgroupCollector struct {
	root string
}

func (c *cgroupCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- cgroupCPUDesc
	ch <- cgroupMemoryDesc
}

// Collect reports what it can read: a cgroup that went away while it was
// read (a service stopping) is left out, as is a figure its controller
// does not give.
func (c *cgroupCollector) Collect(ch chan<- prometheus.Metric) {
	for _, rel := range cgroupsBelow(c.root, cgroupDepth) {
		dir := filepath.Join(c.root, rel)
		if usec, err := cpuUsageMicros(dir); err == nil {
			ch <- prometheus.MustNewConstMetric(cgroupCPUDesc, prometheus.CounterValue, float64(usec)/1e6, rel)
		}
		if b, err := readUint(filepath.Join(dir, "memory.current")); err == nil {
			ch <- prometheus.MustNewConstMetric(cgroupMemoryDesc, prometheus.GaugeValue, float64(b), rel)
		}
	}
}

// cgroupsBelow lists the cgroups under root down to depth levels, as
// slash-separated paths relative to it, parents before children. A
// directory that cannot be read is skipped.
func cgroupsBelow(root string, depth int) []string {
	var out []string
	var walk func(rel string, level int)
	walk = func(rel string, level int) {
		if level > depth {
			return
		}
		entries, err := os.ReadDir(filepath.Join(root, rel))
		if err != nil {
			return
		}
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			child := e.Name()
			if rel != "" {
				child = rel + "/" + child
			}
			out = append(out, child)
			walk(child, level+1)
		}
	}
	walk("", 1)
	return out
}

// cpuUsageMicros reads usage_usec from dir's cpu.stat, which cgroup v2
// keeps with or without the cpu controller.
func cpuUsageMicros(dir string) (uint64, error) {
	data, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return 0, err
	}
	return parseCPUStat(data)
}

// parseCPUStat finds usage_usec in a cpu.stat file's content.
func parseCPUStat(data []byte) (uint64, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), " ")
		if ok && key == "usage_usec" {
			n, err := strconv.ParseUint(strings.TrimSpace(val), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("cpu.stat: usage_usec %q: %w", val, err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("cpu.stat has no usage_usec: %w", fs.ErrNotExist)
}

// readUint reads a file that holds one unsigned number (memory.current).
func readUint(path string) (uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return n, nil
}

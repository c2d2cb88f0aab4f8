package pid1

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// sysctl is one kernel setting: its dotted name and value.
type sysctl struct{ name, value string }

// sysctls are the kernel settings of a node that runs containers, set
// after the modules are loaded (the net.bridge ones exist only once
// br_netfilter is):
var sysctls = []sysctl{
	// Pods' traffic is routed through the node.
	{"net.ipv4.ip_forward", "1"},
	{"net.ipv6.conf.all.forwarding", "1"},
	// Traffic between pods on one bridge passes the node's netfilter
	// rules too (Services are rewritten there).
	{"net.bridge.bridge-nf-call-iptables", "1"},
	{"net.bridge.bridge-nf-call-ip6tables", "1"},
	// Many containers watch files; the defaults (128 instances) run out.
	{"fs.inotify.max_user_instances", "8192"},
	{"fs.inotify.max_user_watches", "524288"},
	// What kubelet expects of the kernel (it checks or sets these
	// itself): memory is overcommitted and the OOM killer, not a panic,
	// handles running out; an oops panics and a panic reboots after 10 s.
	// This replaces the launcher's panic=-1: under qemu -no-reboot the
	// machine still stops, 10 s later.
	{"vm.overcommit_memory", "1"},
	{"vm.panic_on_oom", "0"},
	{"kernel.panic", "10"},
	{"kernel.panic_on_oops", "1"},
	// Each container's keyring counts against root's key quota.
	{"kernel.keys.root_maxkeys", "1000000"},
	{"kernel.keys.root_maxbytes", "25000000"},
}

// sysctlPath is a setting's file under /proc/sys: the dots of its name
// are directories (bridge-nf-call-iptables keeps its dashes).
func sysctlPath(name string) string {
	return filepath.Join("/proc/sys", strings.ReplaceAll(name, ".", "/"))
}

// setSysctls writes every setting of list; the first failure names the
// setting.
func setSysctls(list []sysctl) error {
	for _, s := range list {
		if err := os.WriteFile(sysctlPath(s.name), []byte(s.value), 0); err != nil {
			return fmt.Errorf("setting %s=%s: %w", s.name, s.value, err)
		}
	}
	return nil
}

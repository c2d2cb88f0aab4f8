package pid1

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The cgroup v2 controllers PID 1 delegates to the tree below the root:
// requiredControllers are those kubelet cannot run without (it places
// and limits pods with them); optionalControllers are enabled when the
// kernel has them.
var (
	requiredControllers = []string{"cpu", "cpuset", "io", "memory", "pids"}
	optionalControllers = []string{"hugetlb"}
)

// chooseControllers picks, from a cgroup.controllers file's content (the
// controllers available), those to enable: every required one, which
// must be there, and the optional ones that are.
func chooseControllers(available string) ([]string, error) {
	have := strings.Fields(available)
	var out, missing []string
	for _, c := range requiredControllers {
		if slices.Contains(have, c) {
			out = append(out, c)
		} else {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("cgroup v2: the kernel lacks the controllers %s (it has %q)", strings.Join(missing, ", "), strings.TrimSpace(available))
	}
	for _, c := range optionalControllers {
		if slices.Contains(have, c) {
			out = append(out, c)
		}
	}
	return out, nil
}

// subtreeControl is what enabling controllers writes to
// cgroup.subtree_control: "+cpu +memory ...".
func subtreeControl(controllers []string) string {
	var b strings.Builder
	for i, c := range controllers {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("+" + c)
	}
	return b.String()
}

// setUpCgroups builds the node's cgroup tree on cgroup2 at CgroupRoot:
//
//	/sys/fs/cgroup            the root: kernel threads only, controllers delegated
//	├── polis/                the node's own processes, controllers delegated
//	│   └── agent/            the agent, PID 1 (a leaf)
//	├── kube-controlplane/    a controller's apiserver, controller-manager and
//	│                         scheduler, one cgroup each (kube/controlplane)
//	├── kubernetes/           a worker's containerd, kubelet and pods (kube/kubelet)
//	└── kube-services/        a worker's kube-proxy and DNS server, a low
//	                          cpu.weight (kube/nodeservice)
//
// PID 1 makes only polis/ and agent/. The last three are made by the
// kube packages named, in the agent, when it runs Kubernetes; the
// controllers enabled here for the root's children are theirs. The node's
// metrics report the CPU and memory of the top two levels (nodeapi).
//
// cgroup v2 lets a cgroup enable controllers for its children only while
// it holds no processes itself (the root is exempt, but a process left in
// the root escapes every controller's accounting), so PID 1 first moves
// itself, with all its threads, into polis/agent, and only then enables
// the controllers in the root's and polis/'s cgroup.subtree_control. It
// returns the controllers enabled.
func setUpCgroups() ([]string, error) {
	avail, err := os.ReadFile(filepath.Join(CgroupRoot, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Errorf("cgroup v2: %w", err)
	}
	ctrls, err := chooseControllers(string(avail))
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(CgroupAgentDir, 0o755); err != nil {
		return nil, fmt.Errorf("cgroup v2: %w", err)
	}
	if err := os.WriteFile(filepath.Join(CgroupAgentDir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
		return nil, fmt.Errorf("cgroup v2: moving the agent into %s: %w", CgroupAgentDir, err)
	}
	for _, dir := range []string{CgroupRoot, CgroupNodeDir} {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(subtreeControl(ctrls)), 0); err != nil {
			return nil, fmt.Errorf("cgroup v2: enabling %s for the children of %s: %w", strings.Join(ctrls, ", "), dir, err)
		}
	}
	return ctrls, nil
}

// ownCgroup returns the calling process's cgroup v2 path (from
// /proc/self/cgroup's "0::PATH" line).
func ownCgroup() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("reading the agent's cgroup: %w", err)
	}
	return parseProcCgroup(string(b))
}

// parseProcCgroup finds the cgroup v2 entry (hierarchy 0, no
// controllers) of a /proc/PID/cgroup file.
func parseProcCgroup(s string) (string, error) {
	for line := range strings.SplitSeq(s, "\n") {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "0::"); ok {
			return p, nil
		}
	}
	return "", fmt.Errorf("no cgroup v2 entry (0::PATH) in %q", strings.TrimSpace(s))
}

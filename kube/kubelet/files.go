package kubelet

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/polis-os/polis/kube/pki"
)

// file is one generated file: its path and contents, and whether it holds
// a secret (0600).
type file struct {
	path   string
	data   []byte
	secret bool
}

// files renders everything the runner writes before it starts anything.
func (c Config) files() ([]file, error) {
	kubeconfig, err := pki.Kubeconfig(c.server(), c.Credentials.CA, pki.NodeUserPrefix+c.NodeName, pki.Pair{Cert: c.Credentials.ClientCert, Key: c.Credentials.ClientKey})
	if err != nil {
		return nil, err
	}
	fs := []file{
		{path: c.file(fileContainerdConfig), data: c.containerdConfig()},
		{path: c.file(fileKubeletConfig), data: c.kubeletConfig()},
		{path: c.file(fileKubeconfig), data: kubeconfig, secret: true},
		{path: c.file(fileCA), data: c.Credentials.CA},
		{path: c.file(fileServingCert), data: c.Credentials.ServingCert},
		{path: c.file(fileServingKey), data: c.Credentials.ServingKey, secret: true},
		{path: filepath.Join(c.cniConfDir(), fileCNIConfig), data: c.cniConfig()},
	}
	for _, host := range slices.Sorted(maps.Keys(c.Registries)) {
		fs = append(fs, file{path: filepath.Join(c.hostsDir(), host, "hosts.toml"), data: hostsTOML(c.Registries[host])})
	}
	return fs, nil
}

// write writes fs, each to a temporary name first and renamed, so that no
// process reads half a file.
func write(fs []file) error {
	for _, f := range fs {
		if err := os.MkdirAll(filepath.Dir(f.path), 0o700); err != nil {
			return fmt.Errorf("kubelet: creating %s: %w", filepath.Dir(f.path), err)
		}
		mode := os.FileMode(0o644)
		if f.secret {
			mode = 0o600
		}
		tmp := f.path + ".tmp"
		if err := os.WriteFile(tmp, f.data, mode); err != nil {
			return fmt.Errorf("kubelet: writing %s: %w", f.path, err)
		}
		if err := os.Chmod(tmp, mode); err != nil {
			return fmt.Errorf("kubelet: writing %s: %w", f.path, err)
		}
		if err := os.Rename(tmp, f.path); err != nil {
			return fmt.Errorf("kubelet: writing %s: %w", f.path, err)
		}
	}
	return nil
}

// q quotes s for TOML (a basic string; the paths and names it gets hold no
// control characters, checked by withDefaults where they come from
// outside).
func q(s string) string { return strconv.Quote(s) }

// containerdConfig is containerd's configuration (version 3, containerd
// 2.x): root on the data disk, state and socket in RunDir, runc from
// BinDir with cgroupfs (no systemd), the CNI plugins from the system disk
// with the conf dir Polis writes, the pause image pinned as the sandbox,
// and registries from the hosts directory. Plugins the node cannot use
// (snapshotters for other filesystems, tracing, NRI) are not loaded:
// under TCG every plugin's start is seconds of a single vCPU. All of the
// runtime's state that a reboot empties is in RunDir: containerd's state,
// runc's root (runc's default is /run/containerd/runc) and the sandboxes'
// network namespaces (containerd's default is /var/run/netns), so that
// the runner can empty it after a stop as a reboot would
// (cleanRuntimeState).
func (c Config) containerdConfig() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `version = 3
root = %s
state = %s
disabled_plugins = [
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.erofs",
  "io.containerd.differ.v1.erofs",
  "io.containerd.mount-handler.v1.erofs",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
  "io.containerd.nri.v1.nri",
]

[grpc]
  address = %s

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = %s
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = %s

[plugins."io.containerd.cri.v1.runtime"]
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = %s
        Root = %s
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [%s]
    conf_dir = %s
`, q(c.containerdRoot()), q(c.containerdState()), q(c.containerdSocket()),
		q(c.PauseImageRef), q(c.hostsDir()), q(filepath.Join(c.BinDir, "runc")), q(c.runcRoot()), q(c.CNIBinDir), q(c.cniConfDir()))
	return []byte(b.String())
}

// hostsTOML is containerd's hosts.toml for one registry: pull and resolve
// from endpoint.
func hostsTOML(endpoint string) []byte {
	return fmt.Appendf(nil, "server = %s\n\n[host.%s]\n  capabilities = [\"pull\", \"resolve\"]\n", q(endpoint), q(endpoint))
}

// cniConfig is the pod network: a bridge on the node with addresses from
// PodCIDR (host-local; the node's own range, which the curator gave it,
// so no two nodes' Pods share an address), the node its gateway and every
// Pod's default route, the loopback device of each pod, and host ports
// (portmap, nftables backend). Pods reach the node and each other on it;
// Pods on other nodes through the node, which routes each other node's
// range to it (package clusternet). portmap passes a Pod without host
// ports through untouched; one with host ports needs the nft binary,
// which it names when missing. No masquerading: Pod addresses are
// routed, not hidden. The bridge and the Pods' interfaces get PodMTU,
// when given. The bridge outlives a stop (see Bridge) and keeps the
// gateway address of the range it was made for: forceAddress lets the
// bridge plugin replace it when the range changed (the node's record made
// again), where it would otherwise fail every Pod's ADD ("already has an
// IP address different from").
func (c Config) cniConfig() []byte {
	bridge := map[string]any{
		"type": "bridge", "bridge": Bridge, "isGateway": true, "forceAddress": true, "ipMasq": false, "hairpinMode": true,
		"ipam": map[string]any{
			"type":   "host-local",
			"ranges": [][]map[string]string{{{"subnet": c.PodCIDR.Masked().String()}}},
			"routes": []map[string]string{{"dst": "0.0.0.0/0"}},
		},
	}
	if c.PodMTU > 0 {
		bridge["mtu"] = c.PodMTU
	}
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       CNINetwork,
		"plugins": []any{
			bridge,
			map[string]any{"type": "loopback"},
			map[string]any{"type": "portmap", "backend": "nftables", "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	data, _ := json.MarshalIndent(conf, "", "  ") // plain maps: never fails
	return append(data, '\n')
}

// kubeletConfig is the KubeletConfiguration: the runtime is containerd at
// its socket, cgroups through cgroupfs (no systemd) below Cgroup/pods,
// clients authenticated by the Kubernetes CA or asked of the apiserver
// (webhook), never anonymous, and authorized by the apiserver; serving
// with the certificate the curator issued; no static pods, no read-only
// port; swap tolerated; pods' logs on the data disk; Pods' nameservers
// ClusterDNS, when given.
func (c Config) kubeletConfig() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %s
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 0
containerRuntimeEndpoint: %s
cgroupDriver: cgroupfs
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %s
authorization:
  mode: Webhook
tlsCertFile: %s
tlsPrivateKeyFile: %s
rotateCertificates: false
serverTLSBootstrap: false
failSwapOn: false
clusterDomain: %s
resolvConf: %s
podCIDR: %s
podLogsDir: %s
serializeImagePulls: false
`, q(c.NodeIP.String()), c.KubeletPort, q("unix://"+c.containerdSocket()), q(c.file(fileCA)), q(c.file(fileServingCert)), q(c.file(fileServingKey)),
		DefaultClusterDomain, q(c.ResolvConf), q(c.PodCIDR.Masked().String()), q(filepath.Join(c.StateDir, "pod-logs")))
	if c.Cgroup != "" {
		fmt.Fprintf(&b, "cgroupRoot: %s\n", q(strings.TrimPrefix(c.cgroup(cgroupPods), CgroupMount)))
	}
	if len(c.ClusterDNS) > 0 {
		b.WriteString("clusterDNS:\n")
		for _, a := range c.ClusterDNS {
			fmt.Fprintf(&b, "  - %s\n", q(a.String()))
		}
	}
	return []byte(b.String())
}

// kubeletArgs are the kubelet's flags besides its configuration file:
// what the file cannot say (the node's name and address, its labels,
// where it keeps its state).
func (c Config) kubeletArgs() []string {
	args := []string{
		"kubelet",
		"--config=" + c.file(fileKubeletConfig),
		"--kubeconfig=" + c.file(fileKubeconfig),
		"--hostname-override=" + c.NodeName,
		"--node-ip=" + c.NodeIP.String(),
		"--root-dir=" + filepath.Join(c.StateDir, "kubelet"),
	}
	if len(c.Labels) > 0 {
		args = append(args, "--node-labels="+labelsFlag(c.Labels))
	}
	return args
}

// env is the environment of containerd and kubelet: BinDir first in PATH
// (runc, the shim, mount).
func (c Config) env() []string {
	return []string{"PATH=" + c.BinDir + ":/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/"}
}

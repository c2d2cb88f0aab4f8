// Package proxy renders what kube-proxy needs on a worker node and makes
// the node service (kube/nodeservice) that runs it: the bundle's
// `polis-kube proxy`, in nftables mode, beside the kubelet.
//
// # Model
//
// kube-proxy watches Services and EndpointSlices through the apiserver and
// programs the kernel so that a connection to a Service's ClusterIP
// reaches one of its endpoints: in nftables mode it writes one nftables
// table (ip kube-proxy) through the nft program, which it finds on its
// PATH. The system disk's bin/ holds nft (cmd/polis-nft, which runs
// Debian's nft from the system disk: launch/systembuild), so Config.BinDir
// comes first in its PATH.
//
// Config says everything from outside: the bundle, the node's name and
// address, the cluster's pod range (traffic from elsewhere to a Service is
// masqueraded), the apiserver (the kubelet's local proxy, kube/kubelet,
// whose certificate names localhost) and kube-proxy's credentials, a
// client certificate for system:kube-proxy from the cluster's Kubernetes
// CA (issued by the curator to nodes that hold KubernetesWorker, for a key
// the node keeps). Kubernetes' default RBAC policy binds that user to
// system:node-proxier. Files renders the KubeProxyConfiguration and the
// kubeconfig; Args the command line. Health and metrics are served on the
// node's loopback address only.
//
// kube-proxy leaves its tables (Tables: ip and ip6 kube-proxy) when it
// stops. DeleteTables deletes them, with the nft of Config.BinDir, for a
// node that stops running kube-proxy for good (the kubernetes worker, when
// the role goes); it deletes the kubelet's Pods' host-port table the same
// way.
//
// # What it does not do
//
// It does not route pod traffic between nodes (a Service's endpoints on
// another node are reached only where the pod network routes there), load
// kernel modules (PID 1 loads nftables' and conntrack's), or obtain
// credentials (the kubernetes worker asks the curator).
package proxy

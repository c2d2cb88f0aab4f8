package pki

import (
	"encoding/base64"
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// The files of one controller node's components, by name in the directory
// the runner gives them (kube/controlplane passes their paths in flags).
const (
	FileCA                          = "ca.crt"
	FileServingCert                 = "apiserver.crt"
	FileServingKey                  = "apiserver.key"
	FileServiceAccountKey           = "service-account.key"
	FileServiceAccountPub           = "service-account.pub"
	FileControllerManagerKubeconfig = "controller-manager.kubeconfig"
	FileSchedulerKubeconfig         = "scheduler.kubeconfig"
	// FileKubeletClientCert and FileKubeletClientKey are the apiserver's
	// client certificate towards kubelets (logs, exec, port-forward).
	FileKubeletClientCert = "apiserver-kubelet-client.crt"
	FileKubeletClientKey  = "apiserver-kubelet-client.key"
	// FileReadyzProbeCert and FileReadyzProbeKey are the node agent's
	// client certificate for asking the apiserver's /readyz
	// (ReadyzProbeUser).
	FileReadyzProbeCert = "readyz-probe.crt"
	FileReadyzProbeKey  = "readyz-probe.key"
)

// Files are the contents of a controller node's component files by name;
// Secret says which of them must be written 0600.
type Files map[string][]byte

// Secret reports whether the file name holds a private key (a key file, or
// a kubeconfig, which embeds one).
func Secret(name string) bool {
	return strings.HasSuffix(name, ".key") || strings.HasSuffix(name, ".kubeconfig")
}

// ControlPlaneFiles issues what the components of one controller node need
// and returns it as files: the CA, the apiserver's serving certificate for
// addrs (see IssueServing), the service-account key pair, and kubeconfigs
// for the controller-manager and the scheduler that reach the apiserver at
// server (an https URL, normally this node's own apiserver), and the
// apiserver's client certificate towards kubelets (APIServerKubeletUser in
// system:masters: kubelets ask the apiserver whether a caller may reach
// them, and this key is as guarded as the service-account key beside it),
// and the client certificate of the node agent's /readyz probe
// (ReadyzProbeUser, no group).
func (c *Cluster) ControlPlaneFiles(addrs []netip.Addr, serviceIP netip.Addr, server string, now time.Time) (Files, error) {
	serving, err := c.IssueServing(addrs, serviceIP, []string{"localhost"}, now)
	if err != nil {
		return nil, err
	}
	saPub, err := c.ServiceAccountPublicKey()
	if err != nil {
		return nil, err
	}
	kubeletClient, err := c.IssueClient(APIServerKubeletUser, []string{MastersGroup}, now)
	if err != nil {
		return nil, err
	}
	probe, err := c.IssueClient(ReadyzProbeUser, nil, now)
	if err != nil {
		return nil, err
	}
	f := Files{
		FileKubeletClientCert: kubeletClient.Cert,
		FileKubeletClientKey:  kubeletClient.Key,
		FileReadyzProbeCert:   probe.Cert,
		FileReadyzProbeKey:    probe.Key,
		FileCA:                c.CACert,
		FileServingCert:       serving.Cert,
		FileServingKey:        serving.Key,
		FileServiceAccountKey: c.ServiceAccountKey,
		FileServiceAccountPub: saPub,
	}
	for name, user := range map[string]string{
		FileControllerManagerKubeconfig: ControllerManagerUser,
		FileSchedulerKubeconfig:         SchedulerUser,
	} {
		client, err := c.IssueClient(user, nil, now)
		if err != nil {
			return nil, err
		}
		kc, err := Kubeconfig(server, c.CACert, user, client)
		if err != nil {
			return nil, err
		}
		f[name] = kc
	}
	return f, nil
}

// Kubeconfig returns a kubeconfig in which user reaches the apiserver at
// server (an https URL), trusting ca and authenticating with client, all
// embedded. The same inputs give the same bytes. The cluster and context
// are named "polis".
func Kubeconfig(server string, ca []byte, user string, client Pair) ([]byte, error) {
	if !strings.HasPrefix(server, "https://") {
		return nil, fmt.Errorf("pki: apiserver URL %q is not https", server)
	}
	if user == "" || strings.ContainsAny(user, "\"\n\\") {
		return nil, fmt.Errorf("pki: user name %q cannot go in a kubeconfig", user)
	}
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: polis
  cluster:
    server: %q
    certificate-authority-data: %s
users:
- name: %q
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: polis
  context:
    cluster: polis
    user: %q
current-context: polis
`, server, b64(ca), user, b64(client.Cert), b64(client.Key), user), nil
}

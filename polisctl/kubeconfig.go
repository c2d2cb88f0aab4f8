package polisctl

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/localstorage"
)

// kubeconfigFile is where polisctl kubeconfig writes by default: in the
// configuration directory, beside the owner's other credentials, so that
// it never replaces a kubeconfig of other clusters (~/.kube/config).
const kubeconfigFile = "kubeconfig"

// kubeconfigMarker heads every kubeconfig polisctl writes: a file that
// starts with it may be replaced; any other file is left alone unless
// --force says otherwise.
const kubeconfigMarker = "# Written by polisctl kubeconfig: the Polis cluster's owner in its Kubernetes.\n"

// kubeconfigContext is the name of the kubeconfig's cluster and default
// context; each apiserver also gets a context of its own,
// kubeconfigContext + "-" + its node ID.
const kubeconfigContext = "polis"

// kubeconfigProxyContext is the context that reaches the apiservers
// through polisctl kube-proxy on this machine.
const kubeconfigProxyContext = "polis-proxy"

func (c *cli) kubeconfigCmd() *cobra.Command {
	var (
		output string
		force  bool
	)
	cmd := &cobra.Command{
		Use:   "kubeconfig [--output FILE]",
		Short: "Write a kubeconfig with which the owner reaches the cluster's Kubernetes",
		Long: `kubeconfig makes a new private key on this machine, has the cluster sign a
Kubernetes client certificate for it (user polis-owner in the group
system:masters, Kubernetes' superuser; valid for 24 hours: run it again to
renew), and writes a kubeconfig with the key, the certificate, the cluster's
Kubernetes CA and the apiservers of the nodes that hold the
kubernetes-controller role. The private key never leaves this machine.

The current context ("polis") uses the first apiserver, and each apiserver
has a context of its own too ("polis-NODE_ID"): a kubeconfig names one
server per context, so while that node is off, kubectl fails in it. The
context "polis-proxy" follows every apiserver instead: it goes through
polisctl kube-proxy, which must run on this machine (kubectl --context
polis-proxy …). The file is written atomically,
readable by you alone (0600), by default as kubeconfig in the configuration
directory. It replaces a kubeconfig polisctl wrote before, and refuses any
other file unless --force is given. Then:

    export KUBECONFIG=FILE
    kubectl get nodes,deployments -A`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			path := output
			if path == "" {
				path = filepath.Join(c.configDir, kubeconfigFile)
			}
			abs, err := filepath.Abs(path)
			if err != nil {
				return fmt.Errorf("--output %s: %w", path, err)
			}
			if err := checkReplaceable(abs, force); err != nil {
				return err
			}
			// kubectl reaches the apiservers the way polisctl reaches
			// the curators: through the same proxy (a VM cluster's).
			cfg, err := c.ownerDir()
			if err != nil {
				return err
			}
			proxy, err := cfg.ProxyAddress()
			if err != nil {
				return err
			}
			return c.withSession(func(s *session) error {
				return writeKubeconfig(cmd.Context(), cmd.OutOrStdout(), s, abs, proxy)
			})
		},
	}
	cmd.Flags().StringVar(&output, "output", "", "the file to write (default: kubeconfig in the configuration directory)")
	cmd.Flags().BoolVar(&force, "force", false, "replace the file even if polisctl did not write it")
	return cmd
}

// checkReplaceable refuses to overwrite a file polisctl did not write,
// such as a kubeconfig that holds other clusters.
func checkReplaceable(path string, force bool) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("--output %s: %w", path, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return fmt.Errorf("--output %s is a directory; give a file name", path)
	}
	head := make([]byte, len(kubeconfigMarker))
	n, _ := io.ReadFull(f, head)
	if force || string(head[:n]) == kubeconfigMarker {
		return nil
	}
	return fmt.Errorf("%s exists and polisctl did not write it (it may hold other clusters); choose another --output, or pass --force to replace it", path)
}

// writeKubeconfig asks the cluster for the owner's Kubernetes credentials
// for a fresh key and writes them as a kubeconfig at path.
// proxy, if not empty, is the URL of the proxy kubectl must reach the
// apiservers through (written as each apiserver's proxy-url).
func writeKubeconfig(ctx context.Context, out io.Writer, s *session, path, proxy string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("making a key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	var resp *cpb.IssueKubernetesCredentialsResponse
	err = s.call(ctx, "getting Kubernetes credentials", func(ctx context.Context) (err error) {
		resp, err = s.mgmt.IssueKubernetesCredentials(ctx, &cpb.IssueKubernetesCredentialsRequest{PublicKey: pub})
		return err
	})
	if err != nil {
		return err
	}
	cert, err := x509.ParseCertificate(resp.ClientCertificate)
	if err != nil {
		return fmt.Errorf("the client certificate the curator issued: %w", err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return errors.New("the client certificate the curator issued is not for the key sent")
	}
	ca, err := x509.ParseCertificate(resp.CaCertificate)
	if err != nil {
		return fmt.Errorf("the Kubernetes CA certificate the curator sent: %w", err)
	}
	if err := cert.CheckSignatureFrom(ca); err != nil {
		return fmt.Errorf("the client certificate the curator issued is not from the Kubernetes CA it sent: %w", err)
	}
	if len(resp.ApiServers) == 0 {
		return errors.New("the curator named no apiserver: no node holds the kubernetes-controller role; give one with polisctl node add-role NODE kubernetes-controller")
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	kc, err := kubeconfig(resp, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), proxy)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("writing the kubeconfig: %w", err)
	}
	// Plain: kubectl reads it. Secret: it holds the private key.
	if err := (localstorage.File{Path: path, Secret: true, Plain: true}).Write(kc); err != nil {
		return err
	}
	var servers []string
	for _, a := range resp.ApiServers {
		servers = append(servers, apiServerURL(a))
	}
	fmt.Fprintf(out, `Kubeconfig written to %s: user %s (groups %s), certificate valid until %s (run polisctl kubeconfig again to renew).
apiservers: %s
Use it with:

    export KUBECONFIG=%s
    kubectl get nodes,deployments -A

The current context, %q, names the first apiserver only; while its node is off,
pick another (kubectl config use-context %s-NODE_ID), or run polisctl kube-proxy
and use --context %s, which follows every apiserver.
`, path, resp.User, strings.Join(resp.Groups, ", "), cert.NotAfter.UTC().Format(time.RFC3339), strings.Join(servers, ", "), path,
		kubeconfigContext, kubeconfigContext, kubeconfigProxyContext)
	return nil
}

// apiServerURL is the https URL of one apiserver.
func apiServerURL(a *cpb.KubernetesAPIServer) string {
	if addr, err := netip.ParseAddr(a.Address); err == nil {
		return "https://" + netip.AddrPortFrom(addr, uint16(a.Port)).String()
	}
	return fmt.Sprintf("https://%s:%d", a.Address, a.Port)
}

// The kubeconfig's form (clientcmd's v1 Config), only the fields written.
type (
	kcFile struct {
		APIVersion     string      `json:"apiVersion"`
		Kind           string      `json:"kind"`
		Clusters       []kcCluster `json:"clusters"`
		Users          []kcUser    `json:"users"`
		Contexts       []kcContext `json:"contexts"`
		CurrentContext string      `json:"current-context"`
	}
	kcCluster struct {
		Name    string `json:"name"`
		Cluster struct {
			Server                   string `json:"server"`
			TLSServerName            string `json:"tls-server-name,omitempty"`
			CertificateAuthorityData []byte `json:"certificate-authority-data"`
			ProxyURL                 string `json:"proxy-url,omitempty"`
		} `json:"cluster"`
	}
	kcUser struct {
		Name string `json:"name"`
		User struct {
			ClientCertificateData []byte `json:"client-certificate-data"`
			ClientKeyData         []byte `json:"client-key-data"`
		} `json:"user"`
	}
	kcContext struct {
		Name    string `json:"name"`
		Context struct {
			Cluster string `json:"cluster"`
			User    string `json:"user"`
		} `json:"context"`
	}
)

// kubeconfig renders resp and the PEM private key as a kubeconfig: one
// cluster per apiserver (the first also as "polis"), one for the relay
// (polisctl kube-proxy, "polis-proxy"), one user, a context for each
// cluster. Byte fields are base64 in the YAML, as kubeconfigs
// want them. A non-empty proxy (http://HOST:PORT or socks5://HOST:PORT)
// is every apiserver's proxy-url, which kubectl and client-go honour;
// the relay on this machine is reached directly.
func kubeconfig(resp *cpb.IssueKubernetesCredentialsResponse, keyPEM []byte, proxy string) ([]byte, error) {
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: resp.CaCertificate})
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: resp.ClientCertificate})
	user := kcUser{Name: resp.User}
	user.User.ClientCertificateData = certPEM
	user.User.ClientKeyData = keyPEM
	f := kcFile{APIVersion: "v1", Kind: "Config", Users: []kcUser{user}, CurrentContext: kubeconfigContext}
	// add adds cl, checked with the cluster CA, as the cluster called
	// name, and a context of that name for the user.
	add := func(name string, cl kcCluster) {
		cl.Name = name
		cl.Cluster.CertificateAuthorityData = caPEM
		f.Clusters = append(f.Clusters, cl)
		ctx := kcContext{Name: name}
		ctx.Context.Cluster = name
		ctx.Context.User = resp.User
		f.Contexts = append(f.Contexts, ctx)
	}
	apiServer := func(a *cpb.KubernetesAPIServer) kcCluster {
		var cl kcCluster
		cl.Cluster.Server = apiServerURL(a)
		cl.Cluster.ProxyURL = proxy
		return cl
	}
	add(kubeconfigContext, apiServer(resp.ApiServers[0]))
	for _, a := range resp.ApiServers {
		add(kubeconfigContext+"-"+a.NodeId, apiServer(a))
	}
	// The relay (polisctl kube-proxy) on this machine, which follows
	// every apiserver: the certificate is checked under the name they all
	// carry, not the relay's address.
	var relay kcCluster
	relay.Cluster.Server = "https://" + DefaultKubeProxyAddress
	relay.Cluster.TLSServerName = kubeProxyServerName
	add(kubeconfigProxyContext, relay)
	b, err := yaml.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("encoding the kubeconfig: %w", err)
	}
	return append(append([]byte(kubeconfigMarker), bytes.TrimSpace(b)...), '\n'), nil
}

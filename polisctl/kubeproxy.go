package polisctl

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/spf13/cobra"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/kube/apiproxy"
	"github.com/polis-os/polis/kube/controlplane"
	"github.com/polis-os/polis/kube/pki"
)

// A kubeconfig names one server per cluster, so the context that names one
// apiserver fails while that node is off. kube-proxy is the one address
// that follows them all: a TCP relay on loopback (kube/apiproxy) that sends
// each connection to the first apiserver that accepts it. It relays bytes
// only: TLS runs end to end between kubectl and the apiserver, which
// kubectl checks against the Kubernetes CA under the name every apiserver
// certificate carries (kubeProxyServerName), so the relay can neither read
// nor forge anything.

// DefaultKubeProxyAddress is where polisctl kube-proxy listens unless told
// otherwise, and where the kubeconfig's "polis-proxy" context points.
const DefaultKubeProxyAddress = "127.0.0.1:16443"

// kubeProxyServerName is the TLS name kubectl checks through the relay:
// every apiserver's certificate names it (pki.ServiceNames).
var kubeProxyServerName = pki.ServiceNames[0]

// kubeProxyDialTimeout bounds one attempt to reach an apiserver, so that a
// node that is off costs a connection this much before the next is tried.
const kubeProxyDialTimeout = 2 * time.Second

// kubeProxyRefresh is how often the relay asks the curator again where the
// apiservers are.
const kubeProxyRefresh = 30 * time.Second

func (c *cli) kubeProxyCmd() *cobra.Command {
	var listen string
	cmd := &cobra.Command{
		Use:   "kube-proxy [--listen 127.0.0.1:16443]",
		Short: "Relay kubectl to whichever apiserver answers (the kubeconfig's polis-proxy context)",
		Long: `kube-proxy listens on a loopback address and relays each connection to the
first apiserver that accepts it, among the nodes that hold
kubernetes-controller (asked from the curator at start and every 30
seconds). The kubeconfig's "polis-proxy" context points at it: with it
running, kubectl keeps working while any controller node is up, where the
"polis" context names one apiserver and fails while that node is off.

It relays bytes only: TLS runs between kubectl and the apiserver, checked
against the Kubernetes CA. It runs until interrupted.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ap, err := netip.ParseAddrPort(listen)
			if err != nil || !ap.Addr().IsLoopback() {
				return fmt.Errorf("--listen %q: want a loopback IP:PORT (the relay is for this machine)", listen)
			}
			return c.withSession(func(s *session) error {
				servers, err := s.apiServers(cmd.Context())
				if err != nil {
					return err
				}
				d, err := c.ownerDir()
				if err != nil {
					return err
				}
				dialer, err := d.Dialer()
				if err != nil {
					return err
				}
				p := &apiproxy.Relay{Dial: dialer, DialTimeout: kubeProxyDialTimeout}
				p.SetServers(servers)
				l, err := net.Listen("tcp", ap.String())
				if err != nil {
					return fmt.Errorf("kube-proxy: %w", err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "Relaying %s to the apiservers %v; use kubectl --context polis-proxy. Ctrl-C stops.\n", l.Addr(), servers)
				go s.refreshAPIServers(cmd.Context(), p)
				return p.Serve(cmd.Context(), l)
			})
		},
	}
	cmd.Flags().StringVar(&listen, "listen", DefaultKubeProxyAddress, "the loopback IP:PORT to listen on")
	return cmd
}

// apiServers lists where the apiservers of the UP nodes holding
// KubernetesController listen, by the curator's rule
// (IssueKubernetesCredentials): the node's external address, the port its
// status reports, else controlplane.DefaultPort.
func (s *session) apiServers(ctx context.Context) ([]netip.AddrPort, error) {
	nodes, err := s.listNodes(ctx, &cpb.ListNodesRequest{})
	if err != nil {
		return nil, err
	}
	var out []netip.AddrPort
	for _, n := range nodes {
		if n.State != cpb.NodeState_NODE_STATE_UP || n.Roles.GetKubernetesController() == nil {
			continue
		}
		addr, err := netip.ParseAddr(n.Status.GetExternalAddress())
		if err != nil {
			continue
		}
		port := cmp.Or(n.Status.GetKubernetes().GetApiserverPort(), controlplane.DefaultPort)
		out = append(out, netip.AddrPortFrom(addr, uint16(port)))
	}
	if len(out) == 0 {
		return nil, errors.New("no node holds the kubernetes-controller role; give one with polisctl node add-role NODE kubernetes-controller")
	}
	slices.SortFunc(out, netip.AddrPort.Compare)
	return out, nil
}

// refreshAPIServers keeps p's list current until ctx ends; a failed
// listing keeps the old one.
func (s *session) refreshAPIServers(ctx context.Context, p *apiproxy.Relay) {
	t := time.NewTicker(kubeProxyRefresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if servers, err := s.apiServers(ctx); err == nil {
			p.SetServers(servers)
		}
	}
}

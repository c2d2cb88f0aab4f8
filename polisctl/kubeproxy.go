package polisctl

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/spf13/cobra"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/kube/controlplane"
	"github.com/polis-os/polis/kube/pki"
)

// A kubeconfig names one server per cluster, so the context that names one
// apiserver fails while that node is off. kube-proxy is the one address
// that follows them all: a TCP relay on loopback that sends each
// connection to the first apiserver that accepts it. It relays bytes
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
				p := &kubeProxy{servers: servers}
				dialer, err := proxyDialer(c.configDir, c.proxy)
				if err != nil {
					return err
				}
				p.dial = dialer
				l, err := net.Listen("tcp", ap.String())
				if err != nil {
					return fmt.Errorf("kube-proxy: %w", err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "Relaying %s to the apiservers %v; use kubectl --context polis-proxy. Ctrl-C stops.\n", l.Addr(), servers)
				go s.refreshAPIServers(cmd.Context(), p)
				return p.serve(cmd.Context(), l)
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
func (s *session) refreshAPIServers(ctx context.Context, p *kubeProxy) {
	t := time.NewTicker(kubeProxyRefresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if servers, err := s.apiServers(ctx); err == nil {
			p.setServers(servers)
		}
	}
}

// kubeProxy relays connections to the first of servers that accepts, the
// one that last did first.
type kubeProxy struct {
	// dial opens connections to apiservers; nil dials directly.
	dial func(ctx context.Context, addr string) (net.Conn, error)

	mu      sync.Mutex
	servers []netip.AddrPort
	last    netip.AddrPort
}

func (p *kubeProxy) setServers(s []netip.AddrPort) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.servers = s
}

// order is the servers to try: the one that last accepted first.
func (p *kubeProxy) order() []netip.AddrPort {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := slices.Clone(p.servers)
	if i := slices.Index(out, p.last); i > 0 {
		out[0], out[i] = out[i], out[0]
	}
	return out
}

// serve relays every connection l accepts until ctx ends.
func (p *kubeProxy) serve(ctx context.Context, l net.Listener) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	for {
		conn, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("kube-proxy: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.relay(ctx, conn)
		}()
	}
}

// relay connects conn to the first apiserver that accepts, and copies both
// ways until either side closes.
func (p *kubeProxy) relay(ctx context.Context, conn net.Conn) {
	defer conn.Close()
	var up net.Conn
	for _, s := range p.order() {
		dctx, cancel := context.WithTimeout(ctx, kubeProxyDialTimeout)
		var err error
		if p.dial != nil {
			up, err = p.dial(dctx, s.String())
		} else {
			up, err = (&net.Dialer{}).DialContext(dctx, "tcp", s.String())
		}
		cancel()
		if err == nil {
			p.mu.Lock()
			p.last = s
			p.mu.Unlock()
			break
		}
	}
	if up == nil {
		return // kubectl sees the connection closed: no apiserver answered
	}
	defer up.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close(); up.Close() })
	defer stop()
	done := make(chan struct{})
	go func() {
		io.Copy(up, conn) //nolint:errcheck // either side closing ends the relay
		if tc, ok := up.(interface{ CloseWrite() error }); ok {
			tc.CloseWrite()
		}
		close(done)
	}()
	io.Copy(conn, up) //nolint:errcheck // as above
	conn.Close()
	<-done
}

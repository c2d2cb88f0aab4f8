package polisctl

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/nodeapi"
	"github.com/polis-os/polis/ownerdir"
)

// Command returns polisctl's root command. cmd/polisctl executes it; tests
// execute it in-process with SetArgs, SetIn, SetOut and SetErr. Errors are
// returned, not printed (SilenceErrors): the caller prints them and exits
// non-zero.
func Command() *cobra.Command {
	return newCLI(isTerminal).root()
}

// cli holds the global flags and what the commands share.
type cli struct {
	configDir string
	timeout   time.Duration
	// nodeAPIPort is where the node commands reach a node's own API.
	nodeAPIPort uint16
	// proxy is --proxy: a proxy to reach the cluster through, instead of
	// the configuration's.
	proxy string
	// terminal says whether the reader is an interactive terminal, where
	// take-ownership may ask its question. A field so that tests can
	// answer the question through a pipe.
	terminal func(io.Reader) bool
}

func newCLI(terminal func(io.Reader) bool) *cli {
	return &cli{terminal: terminal}
}

// isTerminal reports whether r is a character device, which is what a
// terminal is; a pipe or a file is not.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func (c *cli) root() *cobra.Command {
	root := &cobra.Command{
		Use:   "polisctl",
		Short: "Manage a Polis cluster",
		Long: `polisctl manages a Polis cluster as its owner.

Start with take-ownership: it exchanges the owner key (given to the cluster
when its first node bootstrapped) for an owner certificate, pins the
cluster's CA on first use like ssh, and saves both in the configuration
directory. Every other command uses what is saved there.

The configuration directory is --config, else $POLISCTL_CONFIG, else
$XDG_CONFIG_HOME/polisctl, else ~/.config/polisctl.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if c.configDir != "" {
				return nil
			}
			d, err := DefaultConfigDir()
			if err != nil {
				return err
			}
			c.configDir = d
			return nil
		},
	}
	root.PersistentFlags().StringVar(&c.configDir, "config", "", "configuration directory (default $POLISCTL_CONFIG, $XDG_CONFIG_HOME/polisctl or ~/.config/polisctl)")
	root.PersistentFlags().DurationVar(&c.timeout, "timeout", 30*time.Second, "how long a command may take to reach the cluster")
	root.PersistentFlags().Uint16Var(&c.nodeAPIPort, "node-api-port", nodeapi.DefaultPort, "the port of the nodes' own API (node logs, services, graph, reboot)")
	root.PersistentFlags().StringVar(&c.proxy, "proxy", "", "reach the cluster through this proxy, http://HOST:PORT (HTTP CONNECT) or socks5://HOST:PORT, instead of the one saved in the configuration (polis-launch --vm saves its own)")
	root.AddCommand(c.takeOwnership(), c.clusterCmd(), c.nodeCmd(), c.ticket(), c.ownerCmd(), c.kubeconfigCmd(), c.kubeProxyCmd())
	refuseUnknownSubcommands(root)
	return root
}

// refuseUnknownSubcommands makes every group command below root (node,
// cluster, owner) refuse an argument that is none of its subcommands, with
// cobra's suggestions, where cobra would print the group's help and exit 0
// ("polisctl node lsit"): a script must see the typo fail. Without
// arguments a group still shows its help. cobra already does this for root.
func refuseUnknownSubcommands(root *cobra.Command) {
	for _, cmd := range root.Commands() {
		refuseUnknownSubcommands(cmd)
		if !cmd.HasSubCommands() || cmd.Runnable() {
			continue
		}
		cmd.Args = cobra.ArbitraryArgs
		// What cobra uses for root: two edits, "lsit" for "list".
		cmd.SuggestionsMinimumDistance = 2
		cmd.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				msg += "; did you mean " + strings.Join(s, " or ") + "?"
			}
			return fmt.Errorf("%s; %s --help lists its commands", msg, cmd.CommandPath())
		}
	}
}

// exactArgs is cobra.ExactArgs with a message that shows the usage.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return fmt.Errorf("%s takes %d argument(s), got %d: usage: %s", cmd.CommandPath(), n, len(args), cmd.UseLine())
		}
		return nil
	}
}

func (c *cli) takeOwnership() *cobra.Command {
	var (
		curators    []string
		keyPath     string
		yes         bool
		fingerprint string
	)
	cmd := &cobra.Command{
		Use:   "take-ownership --curator IP:PORT[,IP:PORT...] --owner-key FILE",
		Short: "Exchange the owner key for an owner certificate, pinning the cluster CA",
		Long: `take-ownership proves to the cluster that you hold the owner key, receives
an owner certificate, and saves the key, the certificate, the cluster's CA
certificate and the curators in the configuration directory.

The first time, polisctl cannot know the cluster's CA: it asks a curator,
shows the CA's SHA-256 fingerprint, and asks whether to trust it (compare it
with the fingerprint the cluster's first node logged). --yes trusts it
without asking; --fingerprint trusts exactly the given one. Without a
terminal to ask on, one of the two is required. Once trusted, the CA is
pinned: a later take-ownership that meets another CA is refused.

Running it again renews the owner certificate.

The owner key file holds an ed25519 private key as PKCS#8, in DER or in PEM
("PRIVATE KEY").`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(curators) == 0 {
				return errors.New("--curator is required: the address (IP:PORT) of at least one curator, such as the first node's, port 7835")
			}
			var aps []netip.AddrPort
			for _, s := range curators {
				ap, err := netip.ParseAddrPort(strings.TrimSpace(s))
				if err != nil {
					return fmt.Errorf("--curator %q: want IP:PORT, such as 192.0.2.1:7835 or [2001:db8::1]:7835", s)
				}
				aps = append(aps, ap)
			}
			if keyPath == "" {
				return errors.New("--owner-key is required: the file with the owner's private key, whose public half the cluster was bootstrapped with")
			}
			key, err := readOwnerKey(keyPath)
			if err != nil {
				return err
			}
			fingerprint = strings.ToLower(strings.ReplaceAll(fingerprint, ":", ""))
			var refusal error
			trust := func(fp string) bool {
				switch {
				case fingerprint != "":
					if fp != fingerprint {
						refusal = fmt.Errorf("the cluster CA has SHA-256 fingerprint %s, not %s as --fingerprint says; nothing was saved", fp, fingerprint)
						return false
					}
					return true
				case yes:
					fmt.Fprintf(cmd.ErrOrStderr(), "Trusting the cluster CA with SHA-256 fingerprint %s (--yes).\n", fp)
					return true
				case !c.terminal(cmd.InOrStdin()):
					refusal = fmt.Errorf("the cluster CA has SHA-256 fingerprint %s, and there is no terminal to ask whether to trust it: "+
						"compare it with the one the cluster's first node logged, then run again with --fingerprint %s (or --yes)", fp, fp)
					return false
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "The cluster CA has SHA-256 fingerprint\n  %s\nTrust it and pin it for this configuration? [y/N] ", fp)
				line, _ := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
				switch strings.ToLower(strings.TrimSpace(line)) {
				case "y", "yes":
					return true
				}
				refusal = errors.New("the cluster CA was not trusted; nothing was saved")
				return false
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), c.timeout)
			defer cancel()
			d, err := c.ownerDir()
			if err != nil {
				return err
			}
			if err := d.TakeOwnership(ctx, aps, key, trust); err != nil {
				if refusal != nil {
					return refusal
				}
				if st, ok := grpcStatus(err); ok && st.Code() == codes.PermissionDenied {
					return fmt.Errorf("taking ownership: the curator refused: %s; is %s the key the cluster's first node was bootstrapped with?", st.Message(), keyPath)
				}
				return explain(err, "taking ownership", c.configDir, ownerdir.AddrList(aps), c.timeout)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "You own the cluster. Credentials saved in %s.\n", c.configDir)
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&curators, "curator", nil, "curator address(es), IP:PORT, comma-separated or repeated")
	cmd.Flags().StringVar(&keyPath, "owner-key", "", "file with the owner's ed25519 private key (PKCS#8, DER or PEM)")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "trust the cluster CA without asking (first use only)")
	cmd.Flags().StringVar(&fingerprint, "fingerprint", "", "trust the cluster CA only if its SHA-256 fingerprint (hex) is this")
	return cmd
}

// readOwnerKey reads an ed25519 private key in PKCS#8, DER (as
// identity.MarshalPrivateKey writes it) or PEM.
func readOwnerKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the owner key: %w", err)
	}
	if blk, _ := pem.Decode(b); blk != nil {
		if blk.Type != "PRIVATE KEY" {
			return nil, fmt.Errorf("the owner key %s is a PEM %q block; want \"PRIVATE KEY\" (PKCS#8)", path, blk.Type)
		}
		b = blk.Bytes
	}
	key, err := identity.ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("the owner key %s: %w; want an ed25519 private key in PKCS#8 (DER or PEM)", path, err)
	}
	return key, nil
}

// session is a command's connection to the cluster.
type session struct {
	conn     *grpc.ClientConn
	mgmt     cpb.ManagementServiceClient
	curators string
	dir      string
	timeout  time.Duration
}

func (c *cli) dial() (*session, error) {
	// A command's user wants to hear at once that the cluster is down,
	// not after the whole --timeout.
	d, err := c.ownerDir()
	if err != nil {
		return nil, err
	}
	conn, err := d.Dial(true)
	if err != nil {
		return nil, err
	}
	s := &session{conn: conn, mgmt: cpb.NewManagementServiceClient(conn), dir: c.configDir, timeout: c.timeout}
	// Dial has read the file already; this is only for error messages.
	if eps, err := d.ReadCurators(); err == nil {
		var names []string
		for _, ep := range eps {
			names = append(names, ep.HostPort())
		}
		s.curators = strings.Join(names, ", ")
	}
	return s, nil
}

// saveCurators replaces the saved curators with eps, leaving the file as it
// is when nothing changed.
func (s *session) saveCurators(eps []*cpb.CuratorEndpoint) error {
	cfg, err := ownerdir.Open(s.dir)
	if err != nil {
		return err
	}
	if old, err := cfg.ReadCurators(); err == nil && slices.EqualFunc(old, eps, func(a, b *cpb.CuratorEndpoint) bool { return proto.Equal(a, b) }) {
		return nil
	}
	return cfg.WriteCurators(eps)
}

// call runs f with the command's timeout and turns its error into one that
// says what to do.
func (s *session) call(ctx context.Context, what string, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := f(ctx); err != nil {
		return explain(err, what, s.dir, s.curators, s.timeout)
	}
	return nil
}

// withSession runs f with a session that is closed afterwards.
func (c *cli) withSession(f func(s *session) error) error {
	s, err := c.dial()
	if err != nil {
		return err
	}
	defer s.conn.Close()
	return f(s)
}

func (c *cli) clusterCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "cluster", Short: "The cluster as a whole"}
	var output string
	info := &cobra.Command{
		Use:   "info",
		Short: "Show the curators and the CA of the cluster, and save the curators",
		Long: `info shows the cluster's curators and the fingerprint of its CA. It also
saves the curators in the configuration directory (cluster.json), so that
later commands find the cluster after its control plane has moved.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			return c.withSession(func(s *session) error {
				var resp *cpb.GetClusterInfoResponse
				err := s.call(cmd.Context(), "reading the cluster info", func(ctx context.Context) (err error) {
					resp, err = s.mgmt.GetClusterInfo(ctx, &cpb.GetClusterInfoRequest{})
					return err
				})
				if err != nil {
					return err
				}
				// The curators saved at take-ownership go stale as the
				// control plane moves; the answer is the current list.
				if eps := resp.ClusterDirectory.GetCurators(); len(eps) > 0 {
					if err := s.saveCurators(eps); err != nil {
						return err
					}
				}
				if output == "json" {
					return writeJSON(cmd.OutOrStdout(), resp)
				}
				if err := writeClusterInfo(cmd.OutOrStdout(), resp.ClusterDirectory); err != nil {
					return err
				}
				writeSnapshotPolicy(cmd.OutOrStdout(), resp.ConsensusSnapshots)
				writePodNetwork(cmd.OutOrStdout(), resp.PodNetwork)
				return writeRecovery(cmd.OutOrStdout(), resp.LastRecovery)
			})
		},
	}
	addOutputFlag(info, &output)
	cmd.AddCommand(info, c.backupCmd())
	return cmd
}

func writeClusterInfo(w io.Writer, d *cpb.ClusterDirectory) error {
	fmt.Fprintf(w, "CA fingerprint (SHA-256): %s\n", ownerdir.Fingerprint(d.GetCaCertificate()))
	if ca, err := x509.ParseCertificate(d.GetCaCertificate()); err == nil {
		fmt.Fprintf(w, "CA valid until:           %s\n", ca.NotAfter.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(w, "Curators:\n")
	if len(d.GetCurators()) == 0 {
		fmt.Fprintf(w, "  none reported yet\n")
	}
	for _, ep := range d.GetCurators() {
		fmt.Fprintf(w, "  %s  %s\n", ep.NodeId, ep.HostPort())
	}
	return nil
}

func addOutputFlag(cmd *cobra.Command, output *string) {
	cmd.Flags().StringVarP(output, "output", "o", "table", "output format: table or json")
}

func checkOutput(o string) error {
	switch o {
	case "table", "json":
		return nil
	}
	return fmt.Errorf("--output %q: want table or json", o)
}

// writeJSON prints m as indented protojson, the form every -o json output
// takes, so that scripts can parse it with protojson or any JSON parser.
func writeJSON(w io.Writer, m proto.Message) error {
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(m)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

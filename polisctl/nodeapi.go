package polisctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpb "github.com/polis-os/polis/api/curator/v1"
	nodev1 "github.com/polis-os/polis/api/node/v1"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/nodeapi"
)

// The commands in this file talk to one node's own API (nodeapi), not to
// the curator: they find the node's address in the cluster directory (the
// curator's node list), then call the node directly over mTLS as the
// owner. The node serves with its node API certificate, which names its
// node ID: the client verifies it as any TLS client would, with the
// cluster CA as the only root and the node ID as the server name.

// nodeAPICommands are the node subcommands over the node API.
func (c *cli) nodeAPICommands() []*cobra.Command {
	return []*cobra.Command{c.nodeLogs(), c.nodeServices(), c.nodeGraph(), c.nodePower(nodeapi.Reboot), c.nodePower(nodeapi.PowerOff)}
}

// withNodeAPI finds node arg through the curator and runs f with a client
// of its node API. The curator session is closed before f runs: a follow
// stream may run for long.
func (c *cli) withNodeAPI(ctx context.Context, arg string, f func(api nodev1.NodeServiceClient) error) error {
	id, err := nodeID(arg)
	if err != nil {
		return err
	}
	var addr netip.Addr
	err = c.withSession(func(s *session) error {
		nodes, err := s.listNodes(ctx, &cpb.ListNodesRequest{NodeIds: []string{id}})
		if err != nil {
			return err
		}
		if len(nodes) == 0 {
			return fmt.Errorf("the cluster has no node %s; polisctl node list shows the nodes", id)
		}
		a := nodes[0].GetStatus().GetExternalAddress()
		if addr, err = netip.ParseAddr(a); err != nil {
			return fmt.Errorf("node %s has reported no address yet (%q); is it %s?", id, a, stateName(nodes[0].State))
		}
		return nil
	})
	if err != nil {
		return err
	}
	d, err := c.ownerDir()
	if err != nil {
		return err
	}
	v, cert, _, err := d.Credentials()
	if err != nil {
		return err
	}
	// The server name is the node ID, whatever address is dialled (the
	// launcher's proxy, for a VM cluster): a server at that address that
	// is another node is refused.
	tc, err := identity.NodeAPIClientConfig(v, cert, id)
	if err != nil {
		return err
	}
	ap := netip.AddrPortFrom(addr, c.nodeAPIPort)
	opts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(tc))}
	// A VM cluster's nodes are reached through the launcher's proxy, as
	// the curators are.
	dialer, err := d.Dialer()
	if err != nil {
		return err
	}
	if dialer != nil {
		opts = append(opts, grpc.WithContextDialer(dialer))
	}
	// A node that has just started serves with its node certificate until
	// the curator has issued its node API certificate, a moment later. A
	// handshake that fails verification sent no call (not even a Reboot),
	// so it is tried again, on a new connection, until --timeout.
	deadline := time.Now().Add(c.timeout)
	for {
		err := callNodeAPI(ap.String(), opts, f)
		if err == nil {
			return nil
		}
		retry := certificateRefused(err) && time.Now().Before(deadline)
		if retry {
			t := time.NewTimer(nodeAPIRetry)
			select {
			case <-t.C:
				continue
			case <-ctx.Done():
				t.Stop()
			}
		}
		err = explainNodeAPI(err, "calling the node API", id, ap.String(), c.timeout)
		if certificateRefused(err) {
			return fmt.Errorf("%w (a node that has just started verifies only once the curator has issued its node API certificate)", err)
		}
		return err
	}
}

// nodeAPIRetry is how long withNodeAPI waits before it dials again a node
// whose certificate it could not verify.
const nodeAPIRetry = 500 * time.Millisecond

// callNodeAPI runs f with a client of the node API at target, on a
// connection of its own.
func callNodeAPI(target string, opts []grpc.DialOption, f func(api nodev1.NodeServiceClient) error) error {
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		return err
	}
	defer conn.Close()
	return f(nodev1.NewNodeServiceClient(conn))
}

// certificateRefused reports whether err is the TLS stack's refusal of the
// server's certificate.
func certificateRefused(err error) bool {
	return strings.Contains(err.Error(), "failed to verify certificate")
}

func (c *cli) nodeLogs() *cobra.Command {
	var (
		follow   bool
		runnable string
		since    string
		level    string
		tail     uint32
		output   string
	)
	cmd := &cobra.Command{
		Use:   "logs NODE [-f] [--runnable PREFIX] [--since DURATION|TIME]",
		Short: "Show a node's recent log lines, and follow new ones",
		Long: `logs shows the log lines a node keeps in memory: the last lines of every
runnable (a ring of a fixed size per runnable, so a busy runnable does not
push out a quiet one's), oldest first. --runnable root.roleserve shows that
runnable and everything under it (polisctl node services lists them).
-f goes on showing new lines until interrupted; if the terminal reads too
slowly the node drops lines for it rather than wait, and logs says how many.

-o json prints one JSON object (a LogEntry) per line.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "table" && output != "json" {
				return fmt.Errorf("--output %q: want table or json", output)
			}
			req := &nodev1.LogsRequest{Runnable: runnable, Follow: follow, BacklogLimit: tail}
			lvl, err := zapcore.ParseLevel(level)
			if err != nil {
				return fmt.Errorf("--level %q: want debug, info, warn or error", level)
			}
			req.MinLevel = nodeapi.APILevel(lvl)
			if since != "" {
				t, err := parseSince(since, time.Now())
				if err != nil {
					return err
				}
				req.Since = timestamppb.New(t)
			}
			ctx := cmd.Context()
			return c.withNodeAPI(ctx, args[0], func(api nodev1.NodeServiceClient) error {
				if !follow {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, c.timeout)
					defer cancel()
				}
				stream, err := api.Logs(ctx, req)
				if err != nil {
					return err
				}
				for {
					resp, err := stream.Recv()
					if errors.Is(err, io.EOF) {
						return nil
					}
					if err != nil {
						if follow && ctx.Err() != nil {
							return nil // interrupted: the normal end of -f
						}
						return err
					}
					if resp.Dropped > 0 {
						fmt.Fprintf(cmd.ErrOrStderr(), "polisctl: %d lines dropped: reading too slowly for the node\n", resp.Dropped)
					}
					for _, e := range resp.Entries {
						if err := writeLogEntry(cmd.OutOrStdout(), e, output); err != nil {
							return err
						}
					}
				}
			})
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "go on showing new lines until interrupted")
	cmd.Flags().StringVar(&runnable, "runnable", "", "only lines of this runnable and those under it (root.roleserve)")
	cmd.Flags().StringVar(&since, "since", "", "only lines logged since: a duration back from now (10m) or a time (RFC 3339)")
	cmd.Flags().StringVar(&level, "level", "info", "the lowest level shown: debug, info, warn, error")
	cmd.Flags().Uint32VarP(&tail, "tail", "n", 0, "only the last N lines of the backlog (0: all kept)")
	addOutputFlag(cmd, &output)
	return cmd
}

// parseSince reads --since: a duration back from now, or an RFC 3339 time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("--since %q: give a positive duration back from now, such as 10m", s)
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--since %q: want a duration (10m, 1h30m) or a time such as 2026-11-24T07:00:00Z", s)
	}
	return t, nil
}

func writeLogEntry(w io.Writer, e *nodev1.LogEntry, output string) error {
	if output == "json" {
		b, err := protojson.Marshal(e)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	lvl := strings.TrimPrefix(e.Level.String(), "LOG_LEVEL_")
	fields := ""
	if e.FieldsJson != "{}" && e.FieldsJson != "" {
		fields = " " + e.FieldsJson
	}
	_, err := fmt.Fprintf(w, "%s %-5s %s %s%s\n", e.Time.AsTime().UTC().Format("2006-01-02T15:04:05.000Z"), lvl, e.Runnable, e.Message, fields)
	return err
}

func (c *cli) nodeServices() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "services NODE",
		Short: "Show a node's runnables: state, restarts, last error",
		Long: `services shows every runnable of the node's supervisor tree, indented under
its parent: its state (running, healthy, done, failed, backoff until when,
...), since when, how often it restarted, and why it last failed.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), c.timeout)
			defer cancel()
			return c.withNodeAPI(ctx, args[0], func(api nodev1.NodeServiceClient) error {
				resp, err := api.GetSupervisorTree(ctx, &nodev1.GetSupervisorTreeRequest{})
				if err != nil {
					return err
				}
				if output == "json" {
					return writeJSON(cmd.OutOrStdout(), resp)
				}
				return writeServices(cmd.OutOrStdout(), resp.Runnables, time.Now())
			})
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

func writeServices(w io.Writer, rs []*nodev1.Runnable, now time.Time) error {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "RUNNABLE\tSTATE\tSINCE\tRESTARTS\tLAST ERROR")
	for _, r := range rs {
		depth := strings.Count(r.Name, ".")
		name := strings.Repeat("  ", depth) + r.Name[strings.LastIndexByte(r.Name, '.')+1:]
		state := strings.ToLower(strings.TrimPrefix(r.State.String(), "RUNNABLE_STATE_"))
		if r.BackoffUntil != nil {
			state += fmt.Sprintf(" (restarts in %s)", r.BackoffUntil.AsTime().Sub(now).Round(time.Second))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s ago\t%d\t%s\n", name, state, now.Sub(r.Since.AsTime()).Round(time.Second), r.Restarts, dash(r.LastError))
	}
	return tw.Flush()
}

func (c *cli) nodeGraph() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "graph NODE [-o table|dot|json]",
		Short: "Show a node's role server: values, who writes and reads them, why workers last reacted",
		Long: `graph shows the role server of a node: every value with its version and a
short rendering of its data, the worker that writes it and those that read
it, and every worker's last reaction with its reason. -o dot prints the
graph for Graphviz (polisctl node graph NODE -o dot | dot -Tsvg > g.svg).`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch output {
			case "table", "json", "dot":
			default:
				return fmt.Errorf("--output %q: want table, dot or json", output)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), c.timeout)
			defer cancel()
			return c.withNodeAPI(ctx, args[0], func(api nodev1.NodeServiceClient) error {
				resp, err := api.GetRoleServerGraph(ctx, &nodev1.GetRoleServerGraphRequest{})
				if err != nil {
					return err
				}
				switch output {
				case "json":
					return writeJSON(cmd.OutOrStdout(), resp)
				case "dot":
					return writeGraphDot(cmd.OutOrStdout(), resp)
				}
				return writeGraph(cmd.OutOrStdout(), resp, time.Now())
			})
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, dot or json")
	return cmd
}

func writeGraph(w io.Writer, g *nodev1.GetRoleServerGraphResponse, now time.Time) error {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "VALUE\tVERSION\tWRITER\tREADERS\tDATA")
	for _, v := range g.Values {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", v.Name, v.Version, strings.Join(v.Writers, ","), dash(strings.Join(v.Readers, ",")), v.Summary)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "WORKER\tREACTIONS\tLAST REACTION\tWHY")
	for _, wk := range g.Workers {
		r := wk.LastReaction
		if r == nil {
			fmt.Fprintf(tw, "%s\t-\t-\t-\n", wk.Name)
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%s ago\t%s\n", wk.Name, r.Count, now.Sub(r.Time.AsTime()).Round(time.Millisecond), r.Why)
	}
	return tw.Flush()
}

// dotQuote quotes s as a Graphviz string, in which only \" and \\ are
// escapes and \n is a line break. Go's %q is not that: it wrote the \n
// of a label as \\n, which Graphviz draws as a backslash and an n.
func dotQuote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}

// writeGraphDot prints the graph in Graphviz's language: workers are
// boxes, values ellipses; an arrow from a worker to a value means it
// writes it, from a value to a worker that it reads it.
func writeGraphDot(w io.Writer, g *nodev1.GetRoleServerGraphResponse) error {
	var b strings.Builder
	b.WriteString("digraph roleserver {\n  rankdir=LR;\n")
	for _, wk := range g.Workers {
		label := wk.Name
		if r := wk.LastReaction; r != nil {
			label += "\n" + r.Why
		}
		fmt.Fprintf(&b, "  %s [shape=box, label=%s];\n", dotQuote("worker/"+wk.Name), dotQuote(label))
	}
	for _, v := range g.Values {
		fmt.Fprintf(&b, "  %s [shape=ellipse, label=%s];\n", dotQuote("value/"+v.Name), dotQuote(fmt.Sprintf("%s v%d", v.Name, v.Version)))
		for _, wr := range v.Writers {
			fmt.Fprintf(&b, "  %s -> %s;\n", dotQuote("worker/"+wr), dotQuote("value/"+v.Name))
		}
		for _, rd := range v.Readers {
			fmt.Fprintf(&b, "  %s -> %s;\n", dotQuote("value/"+v.Name), dotQuote("worker/"+rd))
		}
	}
	b.WriteString("}\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func (c *cli) nodePower(a nodeapi.PowerAction) *cobra.Command {
	use, short, done := "reboot NODE", "Reboot a node (in development: restart its agent process)", "is rebooting"
	if a == nodeapi.PowerOff {
		use, short, done = "poweroff NODE", "Power a node off (in development: stop its agent process)", "is powering off"
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), c.timeout)
			defer cancel()
			return c.withNodeAPI(ctx, args[0], func(api nodev1.NodeServiceClient) error {
				var err error
				if a == nodeapi.Reboot {
					_, err = api.Reboot(ctx, &nodev1.RebootRequest{})
				} else {
					_, err = api.PowerOff(ctx, &nodev1.PowerOffRequest{})
				}
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "Node %s %s.\n", args[0], done)
				return nil
			})
		},
	}
}

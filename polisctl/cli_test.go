package polisctl

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/pem"
	"google.golang.org/protobuf/encoding/protojson"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/node"
	"github.com/polis-os/polis/node/nodetest"
	"github.com/polis-os/polis/ownerdir"
)

// runner runs polisctl's root command in-process against one
// configuration directory.
type runner struct {
	t      *testing.T
	config string
	// terminal is what the commands believe about standard input.
	terminal bool
}

// run executes polisctl with args, stdin as standard input, and returns
// what it printed and its error.
func (r *runner) run(ctx context.Context, stdin string, args ...string) (stdout, stderr string, err error) {
	r.t.Helper()
	var out, errOut bytes.Buffer
	err = r.runTo(ctx, strings.NewReader(stdin), &out, &errOut, args...)
	return out.String(), errOut.String(), err
}

func (r *runner) runTo(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, args ...string) error {
	cmd := newCLI(func(io.Reader) bool { return r.terminal }).root()
	cmd.SetArgs(append([]string{"--config", r.config}, args...))
	cmd.SetIn(stdin)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	return cmd.ExecuteContext(ctx)
}

// ok runs polisctl and fails the test if it fails.
func (r *runner) ok(args ...string) string {
	r.t.Helper()
	out, errOut, err := r.run(ctxT(r.t), "", args...)
	if err != nil {
		r.t.Fatalf("polisctl %s: %v (stderr: %s)", strings.Join(args, " "), err, errOut)
	}
	return out
}

// fails runs polisctl, which must fail with an error that contains every
// one of wants.
func (r *runner) fails(args []string, wants ...string) {
	r.t.Helper()
	_, _, err := r.run(ctxT(r.t), "", args...)
	if err == nil {
		r.t.Fatalf("polisctl %s succeeded, want an error", strings.Join(args, " "))
	}
	r.t.Logf("polisctl %s: %v", strings.Join(args, " "), err)
	for _, w := range wants {
		if !strings.Contains(err.Error(), w) {
			r.t.Errorf("polisctl %s: error %q does not mention %q", strings.Join(args, " "), err, w)
		}
	}
}

func writeKey(t *testing.T, c *testCluster, asPEM bool) string {
	t.Helper()
	der, err := identity.MarshalPrivateKey(c.ownerKey)
	if err != nil {
		t.Fatal(err)
	}
	if asPEM {
		der = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	}
	p := filepath.Join(t.TempDir(), "owner.key")
	if err := os.WriteFile(p, der, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func nodesJSON(t *testing.T, out string) []*cpb.Node {
	t.Helper()
	var resp cpb.ListNodesResponse
	if err := protojson.Unmarshal([]byte(out), &resp); err != nil {
		t.Fatalf("node list -o json printed what is not a ListNodesResponse: %v\n%s", err, out)
	}
	return resp.Nodes
}

// The whole life of a cluster through polisctl: taking ownership (trust on
// first use through the prompt), listing, labels and roles, the ticket as
// node parameters with which a second node registers, approval, watching,
// decommission and delete; and the errors of bad input on the way.
func TestCLI(t *testing.T) {
	c := bootstrap(t)
	first := c.first.Credentials(t)
	fp := ownerdir.Fingerprint(first.CACertificate.Raw)
	r := &runner{t: t, config: filepath.Join(t.TempDir(), "config")}
	curator := c.first.Curator().String()
	own := []string{"take-ownership", "--curator", curator, "--owner-key", writeKey(t, c, true)}

	// Without a terminal and without --yes or --fingerprint, nothing is
	// trusted, and the error says how to go on.
	r.fails(own, fp, "--fingerprint "+fp)
	r.fails(append(own, "--fingerprint", strings.Repeat("ab", 32)), fp, "nothing was saved")
	if _, err := os.Stat(r.config); !os.IsNotExist(err) {
		t.Fatalf("a refused take-ownership left %s: %v", r.config, err)
	}
	// On a terminal the question is asked; "n" refuses, "y" accepts.
	r.terminal = true
	if _, errOut, err := r.run(ctxT(t), "n\n", own...); err == nil || !strings.Contains(errOut, fp) {
		t.Fatalf("take-ownership answered n: %v, prompt %q: want a refusal after a prompt showing %s", err, errOut, fp)
	}
	if _, errOut, err := r.run(ctxT(t), "y\n", own...); err != nil || !strings.Contains(errOut, fp) {
		t.Fatalf("take-ownership answered y: %v, prompt %q", err, errOut)
	}
	r.terminal = false
	// Pinned: no question any more, and a DER key works too.
	own[len(own)-1] = writeKey(t, c, false)
	r.ok(own...)

	// Another key is not the owner's, and nothing is saved for it.
	stranger := &runner{t: t, config: filepath.Join(t.TempDir(), "stranger")}
	stranger.fails([]string{"take-ownership", "--yes", "--curator", curator, "--owner-key", writeKey(t, &testCluster{ownerKey: mustKey(t)}, false)},
		"the curator refused", "does not hold the owner key", "bootstrapped with")
	if _, err := os.Stat(stranger.config); !os.IsNotExist(err) {
		t.Errorf("a refused owner left %s: %v", stranger.config, err)
	}

	if out := r.ok("cluster", "info"); !strings.Contains(out, fp) || !strings.Contains(out, "Pod network:              10.244.0.0/14, a /24 for each Kubernetes node\n") {
		t.Errorf("cluster info does not show the CA fingerprint %s and the default pod network:\n%s", fp, out)
	}

	// The table has its header and the first node, UP, consensus member.
	out := r.ok("node", "list")
	t.Logf("node list:\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[0], "SINCE HEARTBEAT") {
		t.Fatalf("node list:\n%s", out)
	}
	for _, f := range []string{first.NodeID, "UP", "consensus-member", c.first.Addr.String()} {
		if !strings.Contains(lines[1], f) {
			t.Errorf("node list row %q lacks %q", lines[1], f)
		}
	}
	// --proxy: the cluster is reached through the proxy given, HTTP
	// CONNECT or SOCKS5, instead of the saved configuration's (none
	// here, so a dead proxy can only fail if the flag is used).
	r.fails([]string{"--proxy", "http://127.0.0.1:1", "node", "list"}, "127.0.0.1:1")
	r.fails([]string{"--proxy", "ftp://127.0.0.1:1", "node", "list"}, "socks5://HOST:PORT")
	for _, p := range []string{connectProxy(t, curator), socks5Proxy(t, curator)} {
		if nodes := nodesJSON(t, r.ok("--proxy", p, "node", "list", "-o", "json")); len(nodes) != 1 {
			t.Errorf("node list through --proxy %s: %d nodes, want 1", p, len(nodes))
		}
	}
	if nodes := nodesJSON(t, r.ok("node", "list", "-o", "json")); len(nodes) != 1 || nodes[0].Id != first.NodeID || nodes[0].State != cpb.NodeState_NODE_STATE_UP {
		t.Fatalf("node list -o json: %v", nodes)
	}
	var described cpb.Node
	if err := protojson.Unmarshal([]byte(r.ok("node", "describe", first.NodeID, "-o", "json")), &described); err != nil || described.Id != first.NodeID {
		t.Fatalf("node describe -o json: %v, %v", err, described.Id)
	}
	if out := r.ok("node", "describe", first.NodeID); !strings.Contains(out, c.first.Addr.String()) || !strings.Contains(out, "Data sealing:") || !strings.Contains(out, "software (protects nothing") || !regexp.MustCompile(`(?m)^Data disk bound: +no$`).MatchString(out) {
		t.Errorf("node describe does not show the address, or the process node's sealing as software and not bound:\n%s", out)
	}

	// Labels: set two, remove one.
	r.ok("node", "label", first.NodeID, "zone=a", "rack=r1")
	if out := r.ok("node", "label", first.NodeID, "rack-"); !strings.Contains(out, "labels: zone=a\n") {
		t.Errorf("labels after removing rack: %q", out)
	}
	// Roles: give and take the worker role. The node cannot run it (no
	// kubelet; no Kubernetes bundle either), and add-role warns so
	// (issue 26, item 9).
	out, errOut, err := r.run(ctxT(t), "", "node", "add-role", first.NodeID, "kubernetes-worker")
	if err != nil || !strings.Contains(out, "consensus-member, kubernetes-worker\n") {
		t.Errorf("add-role: %q, %v", out, err)
	}
	if !strings.Contains(errOut, "warning: "+first.NodeID+" holds kubernetes-worker but cannot run it: not available") {
		t.Errorf("add-role of a role the node cannot run did not warn: stderr %q", errOut)
	}
	if out := r.ok("node", "remove-role", first.NodeID, "kubernetes-worker"); !strings.Contains(out, "now holds: consensus-member\n") {
		t.Errorf("remove-role: %q", out)
	}
	// The worker role gave the node a pod range, which it keeps.
	if out := r.ok("node", "describe", first.NodeID); !regexp.MustCompile(`Pod range: +10\.244\.0\.0/24\n`).MatchString(out) {
		t.Errorf("node describe after the worker role does not show its pod range:\n%s", out)
	}

	// Bad input is named, with the way out.
	unknown := identity.NodeID(make([]byte, 32))
	r.fails([]string{"node", "add-role", first.NodeID, "etcd"}, `unknown role "etcd"`, "consensus-member, kubernetes-controller, kubernetes-worker")
	r.fails([]string{"node", "approve", "node-1234"}, `"node-1234" is not a node ID`, "polisctl node list")
	r.fails([]string{"node", "describe", unknown}, unknown, "polisctl node list")
	r.fails([]string{"node", "approve", unknown}, unknown, "polisctl node list")
	r.fails([]string{"node", "label", first.NodeID, "zone"}, `"zone"`, "KEY=VALUE", "KEY-")
	r.fails([]string{"node", "list", "-o", "yaml"}, "table or json")
	r.fails([]string{"node", "approve"}, "takes 1 argument")
	// The curator's refusal comes through.
	r.fails([]string{"node", "decommission", first.NodeID}, "decommissioning "+first.NodeID)

	// The ticket as parameters, once the cluster lists its curator.
	if _, err := event.Get(ctxT(t), &c.first.Agent.Values().Directory, event.Filter(func(d []*cpb.CuratorEndpoint) bool { return len(d) > 0 })); err != nil {
		t.Fatal(err)
	}
	// cluster info saves the curators the cluster lists, with node IDs.
	r.ok("cluster", "info")
	cfg, _ := ownerdir.Open(r.config)
	if eps, err := cfg.ReadCurators(); err != nil || len(eps) != 1 || eps[0].NodeId != first.NodeID {
		t.Errorf("after cluster info, the saved curators are %v (%v); want the first node's", eps, err)
	}
	params := filepath.Join(t.TempDir(), "parameters.pb")
	r.ok("ticket", "--parameters", params)
	// Read as the node reads --parameters: as they are.
	raw, err := os.ReadFile(params)
	if err != nil {
		t.Fatal(err)
	}
	p, err := node.ParseParameters(raw)
	if err != nil {
		t.Fatalf("ticket --parameters wrote invalid parameters: %v", err)
	}
	if st, err := os.Stat(params); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the parameters file: %v, mode %v; want 0600", err, st.Mode().Perm())
	}

	// Watch while a second node registers with those parameters.
	watchCtx, stopWatch := context.WithCancel(ctxT(t))
	pr, pw := io.Pipe()
	watchDone := make(chan error, 1)
	go func() {
		err := r.runTo(watchCtx, strings.NewReader(""), pw, io.Discard, "node", "watch", "--interval", "100ms")
		pw.Close()
		watchDone <- err
	}()
	watch := bufio.NewScanner(pr)
	// waitLine reads watch's output up to a line that contains every one
	// of wants, and returns that line.
	waitLine := func(wants ...string) string {
		t.Helper()
	lines:
		for watch.Scan() {
			for _, w := range wants {
				if !strings.Contains(watch.Text(), w) {
					continue lines
				}
			}
			return watch.Text()
		}
		t.Fatalf("node watch ended (%v) before printing a line with %q", watch.Err(), wants)
		return ""
	}
	waitLine(first.NodeID, "UP")

	second := nodetest.StartNode(t, c.addrs[1], p)
	line := waitLine("appeared", "NEW")
	secondID := strings.Fields(line)[1]
	r.ok("node", "approve", secondID)
	if got := second.Credentials(t).NodeID; got != secondID {
		t.Fatalf("watch showed %s appear, but the node is %s", secondID, got)
	}
	waitLine(secondID, "state", "UP")
	r.ok("node", "add-role", secondID, "kubernetes-worker")
	waitLine(secondID, "roles", "kubernetes-worker")
	r.fails([]string{"node", "delete", secondID}, "deleting "+secondID)
	r.ok("node", "decommission", secondID)
	waitLine(secondID, "DECOMMISSIONED")
	r.ok("node", "delete", secondID)
	waitLine(secondID, "deleted")

	stopWatch()
	go io.Copy(io.Discard, pr) // let a write in progress finish
	if err := <-watchDone; err != nil {
		t.Errorf("node watch ended with %v, want nil once interrupted", err)
	}
}

// Without a configuration, every command says where it looked and what
// creates one.
func TestMissingConfig(t *testing.T) {
	r := &runner{t: t, config: filepath.Join(t.TempDir(), "nowhere")}
	r.fails([]string{"node", "list"}, r.config, "does not exist", "polisctl take-ownership")
	// A directory with some files but not all names the missing one.
	if err := os.MkdirAll(r.config, 0o700); err != nil {
		t.Fatal(err)
	}
	key, _ := identity.GenerateKey()
	der, _ := identity.MarshalPrivateKey(key)
	if err := os.WriteFile(filepath.Join(r.config, ownerdir.KeyFile), der, 0o600); err != nil {
		t.Fatal(err)
	}
	r.fails([]string{"cluster", "info"}, filepath.Join(r.config, ownerdir.CertificateFile), "polisctl take-ownership")
}

// take-ownership checks its input before it dials anything.
func TestTakeOwnershipBadInput(t *testing.T) {
	r := &runner{t: t, config: t.TempDir()}
	notAKey := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(notAKey, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1}}), 0o600); err != nil {
		t.Fatal(err)
	}
	r.fails([]string{"take-ownership", "--owner-key", notAKey}, "--curator is required")
	r.fails([]string{"take-ownership", "--curator", "localhost:7835", "--owner-key", notAKey}, `"localhost:7835"`, "IP:PORT")
	r.fails([]string{"take-ownership", "--curator", "127.0.0.1:7835"}, "--owner-key is required")
	r.fails([]string{"take-ownership", "--curator", "127.0.0.1:7835", "--owner-key", notAKey}, notAKey, `"CERTIFICATE"`)
	r.fails([]string{"take-ownership", "--curator", "127.0.0.1:7835", "--owner-key", filepath.Join(t.TempDir(), "missing")}, "reading the owner key")
}

// An unreachable curator is named in the error, after the timeout.
func TestTakeOwnershipUnreachable(t *testing.T) {
	c := &testCluster{ownerKey: mustKey(t)}
	r := &runner{t: t, config: t.TempDir()}
	addr := subnets.Addrs(1)[0].String() + ":7835" // nobody listens there
	r.fails([]string{"--timeout", "1s", "take-ownership", "--yes", "--curator", addr, "--owner-key", writeKey(t, c, false)}, addr, "no curator answered")
}

func mustKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	k, err := identity.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Against a stopped cluster a command fails as soon as every curator
// refused the connection, saying so, instead of after the whole --timeout
// (issue 26, item 2).
func TestStoppedClusterFailsFast(t *testing.T) {
	c := bootstrap(t)
	r := &runner{t: t, config: filepath.Join(t.TempDir(), "config")}
	r.ok("take-ownership", "--curator", c.first.Curator().String(), "--owner-key", writeKey(t, c, false), "--yes")
	c.first.Stop()

	ctx := ctxT(t)
	_, _, err := r.run(ctx, "", "--timeout", "80s", "node", "list")
	if ctx.Err() != nil {
		t.Fatalf("node list waited for its timeout: %v", err)
	}
	if err == nil || !strings.Contains(err.Error(), "no curator could be reached") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("node list against a stopped cluster: %v, want it to say that no curator could be reached (connection refused)", err)
	}
}

// A node API that does not answer is blamed, not a curator (issue 26,
// item 2: "no curator leader answered … (tried …:7836)").
func TestNodeAPIErrorsNameTheNode(t *testing.T) {
	c := bootstrap(t)
	id := c.first.Credentials(t).NodeID
	r := &runner{t: t, config: filepath.Join(t.TempDir(), "config")}
	r.ok("take-ownership", "--curator", c.first.Curator().String(), "--owner-key", writeKey(t, c, false), "--yes")
	port := testutil.FreePort(t, c.addrs[0]).Port() // no node API there
	_, _, err := r.run(ctxT(t), "", "--timeout", "5s", "--node-api-port", strconv.Itoa(int(port)), "node", "services", id)
	if err == nil {
		t.Fatal("node services succeeded where no node API listens")
	}
	if strings.Contains(err.Error(), "curator") || !strings.Contains(err.Error(), "node API of "+id) {
		t.Errorf("node services with the node API down: %v, want it to blame the node API of %s, not a curator", err, id)
	}
}

// A typo'd subcommand fails, with a suggestion, where cobra printed the
// group's help and exited 0 (issue 26, item 9).
func TestUnknownSubcommand(t *testing.T) {
	r := &runner{t: t, config: t.TempDir()}
	r.fails([]string{"node", "lsit"}, `unknown command "lsit" for "polisctl node"`, "did you mean list?")
	r.fails([]string{"owner", "rotate-kye"}, `unknown command "rotate-kye"`, "rotate-key")
	r.fails([]string{"nod", "list"}, `unknown command "nod"`)
	// Without an argument, a group shows its help.
	if out := r.ok("node"); !strings.Contains(out, "Available Commands") {
		t.Errorf("polisctl node printed %q, want its help", out)
	}
}

// A pinned CA that the curators no longer present (a rebuilt cluster) is
// reported as the failed handshake it is, with its advice, also now that
// every command fails fast when no curator can be reached.
func TestRebuiltClusterTLSAdvice(t *testing.T) {
	c := bootstrap(t)
	r := &runner{t: t, config: filepath.Join(t.TempDir(), "config")}
	r.ok("take-ownership", "--curator", c.first.Curator().String(), "--owner-key", writeKey(t, c, false), "--yes")
	// Another cluster on the same address.
	c.first.Stop()
	nodetest.StartNode(t, c.addrs[0], nodetest.BootstrapParameters(mustKey(t))).Credentials(t)
	r.fails([]string{"--timeout", "60s", "node", "list"}, "TLS handshake", "take ownership again")
}

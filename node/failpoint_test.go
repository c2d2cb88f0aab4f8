package node_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/internal/failpoint"
	"github.com/polis-os/polis/localstorage"
	"github.com/polis-os/polis/node/nodetest"
)

// The crash tests: every enrolment path (bootstrap, register, rejoin) is run
// once recording the failpoints it passes (every step that changes the
// cluster and every file write, the role server's saved state included),
// then once per point with a crash there: the agent is stopped at that
// point, with nothing written after it, and a new agent is started over the
// same storage, as after a power cut. Each time the node must come back UP
// as the same node, with its saved state back and its ticket forgotten.

var errCrashed = errors.New("failpoint: crashed here")

// crasher is a failpoint hook for the agent whose storage is under dir.
// Points are named relative to dir, with the number of the pass for points
// passed more than once ("/storage/data/roles.pb: write #2").
type crasher struct {
	dir string
	// target is the point to crash at; "" records only.
	target string

	mu      sync.Mutex
	counts  map[string]int
	passed  []string
	dead    bool
	crashed chan struct{}
}

func newCrasher(dir, target string) *crasher {
	return &crasher{dir: dir, target: target, counts: map[string]int{}, crashed: make(chan struct{})}
}

func (c *crasher) hook(name string) error {
	rel, ok := strings.CutPrefix(name, c.dir)
	if !ok {
		return nil // another agent's
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return errCrashed
	}
	c.counts[rel]++
	if n := c.counts[rel]; n > 1 {
		rel = fmt.Sprintf("%s #%d", rel, n)
	}
	c.passed = append(c.passed, rel)
	if rel == c.target {
		c.dead = true
		close(c.crashed)
		return errCrashed
	}
	return nil
}

func (c *crasher) points() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.passed...)
}

// settled waits until the node has its credentials and has saved its role
// server's state (roles and cluster directory), and returns its ID.
func settled(t *testing.T, n *nodetest.Node) string {
	t.Helper()
	id := n.Credentials(t).NodeID
	root := storage(t, n)
	nodetest.Eventually(t, "the role server's state saved", func() error {
		var roles cpb.Roles
		if err := root.Data.Roles.ReadProto(&roles); err != nil {
			return err
		}
		var dir cpb.ClusterDirectory
		if err := root.ESP.ClusterDirectory.ReadProto(&dir); err != nil {
			return err
		}
		if len(dir.Curators) == 0 {
			return errors.New("the saved directory lists no curator")
		}
		return nil
	})
	return id
}

func storage(t *testing.T, n *nodetest.Node) *localstorage.Root {
	t.Helper()
	root, err := localstorage.New(filepath.Join(n.Dir, "storage"))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// storedID is the ID of the key the node stored, "" if it stored none.
func storedID(t *testing.T, n *nodetest.Node) string {
	t.Helper()
	der, err := storage(t, n).Data.Node.Key.Read()
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	if err != nil {
		t.Fatalf("the stored key after the crash: %v", err)
	}
	key, err := identity.ParsePrivateKey(der)
	if err != nil {
		t.Fatal(err)
	}
	return identity.NodeID(key.Public().(ed25519.PublicKey))
}

// noTicketOnDisk fails unless the node's storage is free of the ticket.
func noTicketOnDisk(t *testing.T, n *nodetest.Node, ticket []byte) {
	t.Helper()
	err := filepath.Walk(filepath.Join(n.Dir, "storage"), func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() || info.Mode()&os.ModeSocket != 0 {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), string(ticket)) {
			return fmt.Errorf("%s holds the register ticket", path)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// crashAndRestart starts n (whose parameters are written) with a crash at
// point, waits for the crash, stops the agent, and starts a new one without
// failpoints. It returns the ID the node had stored before the crash.
func crashAndRestart(t *testing.T, n *nodetest.Node, point string) string {
	t.Helper()
	c := newCrasher(n.Dir, point)
	reset := failpoint.Set(c.hook)
	n.Start(t)
	select {
	case <-c.crashed:
	case <-nodetest.Context(t).Done():
		t.Fatalf("never reached %s; passed %q", point, c.points())
	}
	n.Stop()
	reset()
	before := storedID(t, n)
	n.Start(t)
	return before
}

// approver approves every NEW node until the test ends: the operator of
// the register crash tests.
func approver(t *testing.T, mgmt cpb.ManagementServiceClient) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond) // polling interval, not synchronisation
		defer tick.Stop()
		for {
			if stream, err := mgmt.ListNodes(ctx, &cpb.ListNodesRequest{}); err == nil {
				for {
					resp, err := stream.Recv()
					if err != nil {
						break
					}
					for _, n := range resp.Nodes {
						if n.State == cpb.NodeState_NODE_STATE_NEW {
							mgmt.ApproveNode(ctx, &cpb.ApproveNodeRequest{NodeId: n.Id}) //nolint:errcheck // retried on the next tick
						}
					}
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
}

// recordPoints runs n to the end of its enrolment, recording the points
// passed, and stops it.
func recordPoints(t *testing.T, n *nodetest.Node) (id string, points []string) {
	t.Helper()
	rec := newCrasher(n.Dir, "")
	reset := failpoint.Set(rec.hook)
	defer reset()
	n.Start(t)
	id = settled(t, n)
	n.Stop()
	points = rec.points()
	t.Logf("%d failpoints: %q", len(points), points)
	if len(points) == 0 {
		t.Fatal("no failpoint passed")
	}
	return id, points
}

func TestCrashWhileRegistering(t *testing.T) {
	c := nodetest.FormCluster(t, 1, &subnets)
	ticket := nodetest.RegisterTicket(t, c.Management)
	params := nodetest.RegisterParameters(ticket)
	approver(t, c.Management)

	dry := nodetest.NewNode(t, subnets.Addrs(1)[0])
	dry.WriteParameters(t, params)
	_, points := recordPoints(t, dry)
	for _, want := range []string{"enrolment: registered", "enrolment: committed", "sealed-configuration: write", "roles.pb: write", "cluster-directory.pb: write"} {
		if !containsSuffix(points, want) {
			t.Errorf("registering never passed %q", want)
		}
	}

	for i, p := range points {
		// Short names: the test's directory holds etcd's unix socket.
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Logf("crashing at %s", p)
			n := nodetest.NewNode(t, subnets.Addrs(1)[0])
			n.WriteParameters(t, params)
			before := crashAndRestart(t, n, p)
			id := settled(t, n)
			if before != "" && id != before {
				t.Fatalf("came back as %s, was %s", id, before)
			}
			// One record for the machine: no second registration.
			var records int
			for _, rec := range nodetest.ListNodes(t, c.Management) {
				if rec.GetStatus().GetExternalAddress() == n.Addr.String() {
					records++
				}
			}
			if records != 1 {
				t.Errorf("%d records of the node", records)
			}
			noTicketOnDisk(t, n, ticket.RegisterTicket)
			n.Stop()
		})
	}
}

func TestCrashWhileBootstrapping(t *testing.T) {
	owner, err := identity.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	params := nodetest.BootstrapParameters(owner)
	dry := nodetest.NewNode(t, subnets.Addrs(1)[0])
	dry.WriteParameters(t, params)
	_, points := recordPoints(t, dry)
	for _, want := range []string{"identity.json: write", "enrolment: joined", "sealed-configuration: write", "roles.pb: write"} {
		if !containsSuffix(points, want) {
			t.Errorf("bootstrapping never passed %q", want)
		}
	}
	for i, p := range points {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Logf("crashing at %s", p)
			n := nodetest.NewNode(t, subnets.Addrs(1)[0])
			n.WriteParameters(t, params)
			before := crashAndRestart(t, n, p)
			if id := settled(t, n); before != "" && id != before {
				t.Fatalf("came back as %s, was %s", id, before)
			}
			n.Voter(t)
			n.Stop()
		})
	}
}

// Rejoining: an enrolled node whose certificate is gone joins again
// (Join), and a crash at any point of that ends in the same node.
func TestCrashWhileRejoining(t *testing.T) {
	c := nodetest.FormCluster(t, 2, &subnets)
	n := c.Node(1)
	id := c.IDs[1]
	n.Stop()
	if err := os.Remove(n.ParametersFile()); err != nil {
		t.Fatal(err)
	}
	// Without its certificate the node joins again; without its saved
	// roles it saves them again: every run passes the same points.
	forget := func() {
		root := storage(t, n)
		for _, f := range []localstorage.File{root.Data.Node.Certificate, root.Data.Roles} {
			if err := f.Remove(); err != nil {
				t.Fatal(err)
			}
		}
	}
	forget()
	_, points := recordPoints(t, n)
	if !containsSuffix(points, "enrolment: joined") {
		t.Errorf("rejoining never passed Join")
	}
	for i, p := range points {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Logf("crashing at %s", p)
			forget()
			crashAndRestart(t, n, p)
			if got := settled(t, n); got != id {
				t.Fatalf("came back as %s, want %s", got, id)
			}
			n.Stop()
		})
	}
}

func containsSuffix(list []string, suffix string) bool {
	for _, s := range list {
		if strings.HasSuffix(s, suffix) {
			return true
		}
	}
	return false
}

package polisctl

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	nodev1 "github.com/polis-os/polis/api/node/v1"
	"github.com/polis-os/polis/consensus"
	"github.com/polis-os/polis/curator"
	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/nodeapi"
)

// The node commands over the node API against a running node: logs with
// their filters and follow, services, graph in every format, reboot.
func TestNodeAPICommands(t *testing.T) {
	c := bootstrap(t)
	id := c.first.Credentials(t).NodeID
	r := &runner{t: t, config: filepath.Join(t.TempDir(), "config")}
	r.ok("take-ownership", "--curator", c.first.Curator().String(), "--owner-key", writeKey(t, c, false), "--yes")

	// The tree: the node API itself runs, so it is there and healthy.
	var services string
	testutil.Eventually(t, 60*time.Second, "node services showing the node API healthy", func() error {
		if services = r.ok("node", "services", id); !grpcHealthy.MatchString(services) {
			return fmt.Errorf("node services:\n%s", services)
		}
		return nil
	})
	for _, want := range []string{"RUNNABLE", "root", "\n  roleserve ", "\n    heartbeat ", "\n  nodeapi "} {
		if !strings.Contains(services, want) {
			t.Errorf("node services lacks %q:\n%s", want, services)
		}
	}
	if !grpcHealthy.MatchString(services) {
		t.Errorf("node services does not show the node API's server healthy:\n%s", services)
	}
	var tree nodev1.GetSupervisorTreeResponse
	if err := protojson.Unmarshal([]byte(r.ok("node", "services", id, "-o", "json")), &tree); err != nil || len(tree.Runnables) < 5 {
		t.Errorf("node services -o json: %v, %d runnables", err, len(tree.Runnables))
	}

	graph := r.ok("node", "graph", id)
	for _, want := range []string{"VALUE", "credentials", "(outside)", "localRoles", "rolefetch", "WORKER"} {
		if !strings.Contains(graph, want) {
			t.Errorf("node graph lacks %q:\n%s", want, graph)
		}
	}
	dot := r.ok("node", "graph", id, "-o", "dot")
	if !strings.HasPrefix(dot, "digraph roleserver {") || !strings.Contains(dot, `"worker/rolefetch" -> "value/localRoles";`) {
		t.Errorf("node graph -o dot:\n%s", dot)
	}
	// A worker's last reaction goes on a new line of its box: a newline
	// in the label, which Graphviz writes \n, not a literal backslash
	// (issue 26, item 5).
	if strings.Contains(dot, `\\n`) || !regexp.MustCompile(`label="rolefetch\\n[^"]+"`).MatchString(dot) {
		t.Errorf("node graph -o dot: a worker's label is not its name and reaction on two lines:\n%s", dot)
	}
	var g nodev1.GetRoleServerGraphResponse
	if err := protojson.Unmarshal([]byte(r.ok("node", "graph", id, "-o", "json")), &g); err != nil || len(g.Values) == 0 {
		t.Errorf("node graph -o json: %v, %d values", err, len(g.Values))
	}
	// The node runs a curator: the values that say so are shown set
	// (they were "v0 unset": no view was made of them; issue 26, item 5).
	for _, v := range g.Values {
		switch v.Name {
		case "localCurator", curator.StatusName, consensus.StatusName:
			if v.Version == 0 || v.Summary == "unset" {
				t.Errorf("node graph shows %s as v%d %q while the node's curator serves", v.Name, v.Version, v.Summary)
			}
		}
	}
	r.fails([]string{"node", "graph", id, "-o", "yaml"}, "table, dot or json")

	logs := r.ok("node", "logs", id, "--runnable", "root.roleserve")
	if logs == "" {
		t.Fatal("node logs --runnable root.roleserve printed nothing")
	}
	for line := range strings.Lines(logs) {
		if f := strings.Fields(line); len(f) < 3 || !strings.HasPrefix(f[2], "root.roleserve") {
			t.Errorf("a line not under root.roleserve: %q", line)
		}
	}
	for line := range strings.Lines(r.ok("node", "logs", id, "-o", "json", "-n", "5", "--since", "1h")) {
		var e map[string]any
		if err := json.Unmarshal([]byte(line), &e); err != nil || e["runnable"] == nil {
			t.Errorf("node logs -o json line %q: %v", line, err)
		}
	}
	r.fails([]string{"node", "logs", id, "--since", "yesterday"}, "--since", "duration")
	r.fails([]string{"node", "logs", "node-nope"}, "not a node ID")

	// Follow: start, wait until the backlog is out, reboot the node, and
	// see its warning about it arrive.
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	out := &syncBuffer{}
	followed := make(chan error, 1)
	go func() {
		followed <- r.runTo(ctx, strings.NewReader(""), out, &bytes.Buffer{}, "node", "logs", id, "-f", "--runnable", "root.nodeapi", "--level", "warn")
	}()
	if got := r.ok("node", "reboot", id); !strings.Contains(got, "is rebooting") {
		t.Errorf("node reboot printed %q", got)
	}
	if a := <-c.first.PowerRequests; a != nodeapi.Reboot {
		t.Errorf("the node was asked to %s", a)
	}
	testutil.Eventually(t, 60*time.Second, "node logs -f showing the reboot warning", func() error {
		if got := out.String(); !strings.Contains(got, "going down on request") {
			return fmt.Errorf("it shows:\n%s", got)
		}
		return nil
	})
	cancel()
	if err := <-followed; err != nil {
		t.Errorf("node logs -f ended with %v after an interrupt", err)
	}
}

// grpcHealthy finds the node API's server, healthy, in node services.
var grpcHealthy = regexp.MustCompile(`(?m)^    grpc +healthy `)

// syncBuffer is a bytes.Buffer that one goroutine writes while another
// reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"10m":                  now.Add(-10 * time.Minute),
		"2026-11-24T07:00:00Z": now.Add(-time.Hour),
	} {
		if got, err := parseSince(in, now); err != nil || !got.Equal(want) {
			t.Errorf("parseSince(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"-5m", "yesterday", ""} {
		if _, err := parseSince(bad, now); err == nil {
			t.Errorf("parseSince(%q) succeeded", bad)
		}
	}
}

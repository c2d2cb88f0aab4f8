package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/polis-os/polis/logring"
	"github.com/polis-os/polis/node/pid1"
)

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{args: []string{"--storage", "/s", "--address", "127.0.0.2"}},
		{args: []string{"--address", "127.0.0.2"}, wantErr: "--storage is required"},
		{args: []string{"--storage", "/s"}, wantErr: "--address is required"},
		{args: []string{"--storage", "/s", "--address", "0.0.0.0"}, wantErr: "not an unspecified one"},
		{args: []string{"--storage", "/s", "--address", "::"}, wantErr: "not an unspecified one"},
		{args: []string{"--storage", "/s", "--address", "localhost"}, wantErr: "--address"},
		{args: []string{"--storage", "/s", "--address", "127.0.0.2", "--curator-port", "70000"}, wantErr: "not a port"},
		{args: []string{"--storage", "/s", "--address", "127.0.0.2", "--node-api-port", "0"}, wantErr: "--node-api-port 0: not a port"},
		{args: []string{"--storage", "/s", "--address", "127.0.0.2", "--metrics-port", "65536"}, wantErr: "--metrics-port 65536: not a port"},
		{args: []string{"--storage", "/s", "--address", "127.0.0.2", "--log-format", "xml"}, wantErr: "want json or console"},
		{args: []string{"--storage", "/s", "--address", "127.0.0.2", "extra"}, wantErr: "unexpected arguments"},
		{args: []string{"--storage", "/s", "--address", "127.0.0.2", "--kubernetes-bundle", "polis-kube"}, wantErr: "--kubernetes-bundle \"polis-kube\": give an absolute path"},
		{args: []string{"--storage", "/s", "--address", "127.0.0.2", "--consensus-heartbeat", "500ms", "--consensus-election-timeout", "5s"}},
		{args: []string{"--storage", "/s", "--address", "127.0.0.2", "--consensus-heartbeat", "500ms"}, wantErr: "--consensus-election-timeout 1s is less than five heartbeats of 500ms: raise it to at least 2.5s"},
		{args: []string{"--storage", "/s", "--address", "127.0.0.2", "--consensus-election-timeout", "300ms"}, wantErr: "less than five heartbeats of 100ms"},
		{args: []string{"--storage", "/s", "--address", "127.0.0.2", "--consensus-heartbeat", "-1s"}, wantErr: "must not be negative"},
		{args: []string{"--storage", "/s", "--address", "127.0.0.2", "--consensus-heartbeat", "150500us", "--consensus-election-timeout", "5s"}, wantErr: "whole milliseconds"},
		{args: []string{"--storage", "/s", "--address", "127.0.0.2", "--restore-backup", "b"}, wantErr: "--restore-backup needs --owner-key"},
		{args: []string{"--storage", "/s", "--address", "127.0.0.2", "--owner-key", "k"}, wantErr: "--owner-key is for --restore-backup"},
		{args: []string{"--storage", "/s", "--address", "127.0.0.2", "--restore-backup", "b", "--restore-snapshot", "s"}, wantErr: "give one"},
		{args: []string{"--storage", "/s", "--address", "127.0.0.2", "--restore-snapshot", "s", "--recover-single-member"}, wantErr: "--recover-single-member recovers on the node's own data"},
		{args: []string{"--storage", "/s", "--address", "127.0.0.2", "--restore-backup", "b", "--owner-key", "/nonexistent/key.der"}, wantErr: "--owner-key: open /nonexistent/key.der"},
		{args: []string{"--storage", "/s", "--address", "127.0.0.2", "--restore-snapshot", "s"}},
	} {
		o, err := parseFlags(tc.args, io.Discard)
		if tc.wantErr == "" {
			if err != nil {
				t.Errorf("%q: %v", tc.args, err)
				continue
			}
			if o.cfg.ConsensusPort != 7834 || o.cfg.CuratorPort != 7835 || o.cfg.NodeAPIPort != 7836 || o.cfg.MetricsPort != 7837 {
				t.Errorf("%q: ports %d/%d/%d/%d, want the defaults", tc.args, o.cfg.ConsensusPort, o.cfg.CuratorPort, o.cfg.NodeAPIPort, o.cfg.MetricsPort)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%q: error %v, want one containing %q", tc.args, err, tc.wantErr)
		}
	}
}

// TestKernelCommandLineFlags: every flag a machine's kernel command line
// may set (pid1.AgentFlags) is one of the agent's, and takes its value in
// the one-argument form PID 1 passes (--NAME=VALUE), booleans included.
func TestKernelCommandLineFlags(t *testing.T) {
	values := map[string]string{
		"lease-ttl":                  "3s",
		"heartbeat-interval":         "1s",
		"consensus-port":             "7001",
		"curator-port":               "7002",
		"consensus-heartbeat":        "500ms",
		"consensus-election-timeout": "5s",
		"kubernetes-registry":        "docker.io=http://10.77.0.254:5000",
		"recover-single-member":      "true",
		"restore-snapshot":           pid1.RestoreSnapshotPath,
	}
	args := []string{"--storage", "/s", "--address", "10.77.0.2"}
	for _, name := range pid1.AgentFlags {
		v, ok := values[name]
		if !ok {
			t.Errorf("no value to try for the kernel command line's %s", name)
			continue
		}
		args = append(args, "--"+name+"="+v)
	}
	// A boot recovers or restores, not both: the two are tried apart.
	recovery := slices.DeleteFunc(slices.Clone(args), func(a string) bool { return strings.HasPrefix(a, "--restore-snapshot=") })
	o, err := parseFlags(recovery, io.Discard)
	if err != nil {
		t.Fatalf("%q: %v", recovery, err)
	}
	restore := slices.DeleteFunc(slices.Clone(args), func(a string) bool { return strings.HasPrefix(a, "--recover-single-member=") })
	if r, err := parseFlags(restore, io.Discard); err != nil || r.cfg.Restore == nil || r.cfg.Restore.Snapshot != pid1.RestoreSnapshotPath {
		t.Errorf("%q: %v; want a restore from %s", restore, err, pid1.RestoreSnapshotPath)
	}
	if !o.cfg.RecoverConsensus || o.cfg.LeaseTTL != 3*time.Second || o.cfg.ConsensusPort != 7001 || o.cfg.CuratorPort != 7002 ||
		o.cfg.ConsensusHeartbeat != 500*time.Millisecond || o.cfg.ConsensusElectionTimeout != 5*time.Second || o.cfg.KubernetesRegistries["docker.io"] != "http://10.77.0.254:5000" {
		t.Errorf("%q parsed as %+v", args, o.cfg)
	}
}

// The runnable's name is what makes a node's log readable: check that both
// formats carry the logger's name.
func TestLoggerNamesRunnable(t *testing.T) {
	var buf bytes.Buffer
	newLogger("json", zapcore.InfoLevel, &buf, nil).Named("root").Named("roleserve").Info("hello")
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("%q: %v", buf.String(), err)
	}
	if line["logger"] != "root.roleserve" {
		t.Errorf("json line %q has no logger root.roleserve", buf.String())
	}
	buf.Reset()
	newLogger("console", zapcore.InfoLevel, &buf, nil).Named("root").Named("heartbeat").Info("hello")
	if !strings.Contains(buf.String(), "root.heartbeat") {
		t.Errorf("console line %q does not name the runnable", buf.String())
	}
}

// Lines go to the log ring as well as to the output, at the same level.
func TestLoggerFeedsTheRing(t *testing.T) {
	var buf bytes.Buffer
	ring := logring.New(logring.Config{})
	l := newLogger("console", zapcore.InfoLevel, &buf, ring).Named("root").Named("heartbeat")
	l.Debug("below the level")
	l.Info("hello", zap.Int("n", 1))
	got := ring.Backlog(logring.Filter{MinLevel: zapcore.DebugLevel})
	if len(got) != 1 || got[0].Logger != "root.heartbeat" || got[0].Message != "hello" || got[0].Fields != `{"n":1}` {
		t.Errorf("ring holds %+v", got)
	}
	if !strings.Contains(buf.String(), "hello") {
		t.Errorf("the output lost the line: %q", buf.String())
	}
}

// The bundle's path reaches the node's configuration.
func TestKubernetesBundleFlag(t *testing.T) {
	o, err := parseFlags([]string{"--storage", "/s", "--address", "127.0.0.2", "--kubernetes-bundle", "/opt/polis/polis-kube"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.cfg.KubernetesBundle != "/opt/polis/polis-kube" {
		t.Errorf("KubernetesBundle %q", o.cfg.KubernetesBundle)
	}
}

// The runtime's root and the registries reach the node's configuration;
// a relative root and a registry without its endpoint are refused.
func TestKubernetesRuntimeFlags(t *testing.T) {
	o, err := parseFlags([]string{"--storage", "/s", "--address", "127.0.0.2", "--kubernetes-runtime", "/system",
		"--kubernetes-registry", "demo.local:5000=http://10.0.0.1:5000", "--kubernetes-registry", "x.io=https://mirror"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.cfg.KubernetesRuntime != "/system" || o.cfg.KubernetesRegistries["demo.local:5000"] != "http://10.0.0.1:5000" || o.cfg.KubernetesRegistries["x.io"] != "https://mirror" {
		t.Errorf("runtime %q, registries %v", o.cfg.KubernetesRuntime, o.cfg.KubernetesRegistries)
	}
	for _, args := range [][]string{{"--kubernetes-runtime", "system"}, {"--kubernetes-registry", "demo.local"}} {
		if _, err := parseFlags(append([]string{"--storage", "/s", "--address", "127.0.0.2"}, args...), io.Discard); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

// A node that has not enrolled, started with parameters that are missing,
// empty or corrupt, exits with an error naming the file instead of
// retrying forever with a stack trace (issue 26, item 4).
func TestBadParametersExit(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.pb")
	corrupt := filepath.Join(dir, "corrupt.pb")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(corrupt, []byte("\xff\xff\xff not a protobuf"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, file string
		want       []string
	}{
		{"missing", filepath.Join(dir, "missing.pb"), []string{"missing.pb", "does not exist"}},
		{"empty", empty, []string{"empty.pb"}},
		{"corrupt", corrupt, []string{"corrupt.pb", "corrupt"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var logs bytes.Buffer
			err := run(ctx, []string{"--storage", t.TempDir(), "--address", "127.0.0.1", "--parameters", c.file}, &logs)
			if ctx.Err() != nil {
				t.Fatalf("polis-node kept running (retrying) with %s parameters: %v\n%s", c.name, err, logs.String())
			}
			if err == nil {
				t.Fatalf("polis-node with %s parameters succeeded", c.name)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if strings.Contains(logs.String(), "goroutine ") || strings.Contains(logs.String(), ".go:") && strings.Contains(logs.String(), "ERROR") {
				t.Errorf("polis-node logged a stack trace:\n%s", logs.String())
			}
		})
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/polis-os/polis/logring"
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

package nodeapi_test

import (
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/polis-os/polis/logring"
	"github.com/polis-os/polis/nodeapi"
)

func TestLogReactions(t *testing.T) {
	ring := logring.New(logring.Config{})
	rs := zap.New(ring.Core(zapcore.DebugLevel)).Named("root").Named("roleserve")
	hb := rs.Named("heartbeat")
	hb.Info("heartbeating", zap.String("because", "membership v1"))
	hb.Debug("heartbeating", zap.String("because", "membership v1 → v2"))
	hb.Info("sent") // no reason: not a reaction
	hb.Named("child").Info("x", zap.String("because", "a child's, not the worker's"))
	rs.Named("heartbeater").Info("x", zap.String("because", "another worker's"))

	l := nodeapi.LogReactions{Ring: ring, Prefix: "root.roleserve"}
	r, ok := l.LastReaction("heartbeat")
	if !ok || r.Why != "membership v1 → v2" || r.Count != 2 || r.Time.IsZero() {
		t.Errorf("LastReaction(heartbeat) = %+v, %t", r, ok)
	}
	if r, ok := l.LastReaction("rolefetch"); ok {
		t.Errorf("LastReaction(rolefetch) = %+v for a worker that never logged", r)
	}
}

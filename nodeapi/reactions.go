package nodeapi

import (
	"encoding/json"

	"go.uber.org/zap/zapcore"

	"github.com/polis-os/polis/logring"
)

// LogReactions finds each worker's last reaction in the node's log ring.
// The role server's workers log every wake-up with its reason in a
// "because" field (event.Why), so the newest such line of a worker's own
// logger is its last reaction.
//
// It is a stand-in until the role server keeps that record itself (then
// RoleServer.Reactions reads the record instead): it only sees reactions
// still kept in the ring, logged at a level the ring keeps, and Count
// counts those lines, not every reaction since the worker started.
type LogReactions struct {
	// Ring holds the node's lines.
	Ring *logring.Ring
	// Prefix is the role server's place in the tree ("root.roleserve");
	// a worker's logger is Prefix.worker.
	Prefix string
}

// LastReaction implements Reactions.
func (l LogReactions) LastReaction(worker string) (Reaction, bool) {
	name := l.Prefix + "." + worker
	lines := l.Ring.Backlog(logring.Filter{Runnable: name, MinLevel: zapcore.DebugLevel})
	var last Reaction
	found := false
	for _, e := range lines {
		if e.Logger != name {
			continue // a child of the worker, not the worker
		}
		var fields struct {
			Because string `json:"because"`
		}
		if json.Unmarshal([]byte(e.Fields), &fields) != nil || fields.Because == "" {
			continue
		}
		last.Time, last.Why = e.Time, fields.Because
		last.Count++
		found = true
	}
	return last, found
}

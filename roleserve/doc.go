// Package roleserve is the node's role server: a set of event values that
// hold what the node knows (how to reach a curator, its roles, its local
// control plane, ...) and small workers that each combine a few of them and
// react.
//
// Every worker declares the values it reads and writes in one place, its
// constructor, through Reads and Writes on a Graph, and keeps only what
// those return: a worker cannot reach a value it did not declare, and the
// Graph is the role server's true dependency graph, logged at start and
// checked by tests (no value read that nobody writes, no value with two
// writers).
//
// A worker is a loop: wait on its inputs with event.Inputs ("until these
// values satisfy these predicates and one of them changed"), then act in
// plain sequential code. It returns an error when it cannot go on, and the
// supervisor restarts it; nothing is retried by hand, and no worker starts
// goroutines to combine values.
//
// # Who provides data to whom
//
//	                     credentials (written by enrolment, node/)
//	                          │
//	                          ▼
//	  directory ──────► membership ◄──────── localControlPlane ◄── controlplane
//	      ▲                   │                 │                      ▲
//	      │     ┌─────────────┼────────────┬────┼─────────┐            │
//	      │     ▼             ▼            ▼    ▼         ▼            │
//	clusterdirectory      rolefetch      statuspush    heartbeat       │
//	  (saves it)         (saves them)       │              │           │
//	                          │             └──► curator ◄─┘           │
//	                          │ localRoles                             │
//	                          ├────────────────────────────────────────┘
//	                          ▼
//	                      kubernetes ──► kubernetes (status)
//
// membership owns the one answer to "how do I reach a curator?": a
// connection per set of credentials that finds the curator leader through
// the local curator, when this node runs one, and the directory. The loops
// in the picture are broken at start, from disk: clusterdirectory publishes
// the directory it saved (empty on a node that has none; a bootstrapping
// node reaches its own curator), and rolefetch publishes the roles it saved,
// so that a lone control-plane node starts its control plane, and with it
// the curator everything else waits for, before it can reach any curator.
// controlplane sets localControlPlane to nil when it starts, so that its
// readers need not wait for a control plane that may never come.
//
// # What it does not do
//
// The role server does not enrol the node: credentials come from outside
// (bootstrap, registration, or rejoining after a reboot). The kubernetes
// worker does not run Kubernetes yet; its status says so.
package roleserve

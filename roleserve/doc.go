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
// This package is being built in steps; see docs/architecture.md.
package roleserve

// Package clustertest is the kit of the suites over whole clusters
// (test/e2e with processes, test/vm with VMs): what they ask of a cluster,
// and the scenarios both run, are written here once, so that both modes
// check the same things.
//
//   - Predicates on the node list (predicates.go): a node UP and healthy,
//     a consensus member serving a curator, a node back from a new boot;
//     Whole says why a node list is not yet a whole cluster, naming every
//     node still awaited; Await polls a node list until such a condition
//     holds, logging what it still awaits each time that changes.
//   - Acknowledged writes (writer.go): a Writer writes labels one after
//     the other while a suite breaks the cluster, records which writes the
//     cluster acknowledged and which failed (a failed write may still have
//     been applied), and says whether any acknowledged write was lost.
//   - polisctl (polisctl.go): a Polisctl runs the command against a
//     cluster's configuration, as the binary an operator runs or in this
//     process, and parses its JSON.
//   - Scenarios (scenarios.go): HA (every node rebooted in turn under a
//     Writer) and cold start (every node powered off at once and started
//     again), written once against a launched cluster; a Mode holds what
//     differs between processes and VMs (how a node reboots, what to check
//     while the cluster is off, what to show when it does not come whole).
//     test/e2e runs them on processes, test/vm on VMs.
//
// Every helper reports what it found wrong as an error naming the node and
// the value; the suite decides whether to wait longer or fail.
package clustertest

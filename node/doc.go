// Package node is the node agent: it finds out whether the machine
// bootstraps a new cluster, registers into one, or rejoins its cluster after
// a reboot, and then runs the role server and the node API.
//
// Node parameters (what to do on a node's first start) come from qemu's
// fw_cfg, the ESP or a file given on the command line; LoadParameters reads
// them all and refuses sources that disagree. A node that enrolled keeps a
// sealed configuration (its key and the cluster CA) and rejoins with it;
// the parameters' register ticket is forgotten once it is no longer needed.
//
// Enrolment (enrol.go) bootstraps, registers and waits for approval, or
// rejoins, safe against a crash at any step (tested with failpoints), and
// then renews the node certificate before it expires. The node API
// certificate is asked of the curator separately (nodeapicert.go).
//
// The roles and cluster directory the role server saves (roleserve.Saved)
// are read at boot, before the role server runs: a lone control-plane node
// must start its control plane from its saved roles, and a worker must
// find a curator from its saved directory. When either is damaged, the
// agent rebuilds it (from the consensus data, from the parameters).
// RecoverConsensus makes a surviving consensus member the single member of
// a cluster that lost its quorum (recovery.go); Restore makes a new node on
// fresh storage the single consensus member of a cluster restored from a
// backup or snapshot (restore.go).
//
// The path a node takes from boot to a running role server is drawn in
// docs/architecture.md ("Three paths to follow").
package node

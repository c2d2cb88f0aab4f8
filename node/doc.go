// Package node is the node agent: it finds out whether the machine
// bootstraps a new cluster, registers into one, or rejoins its cluster after
// a reboot, and then runs the role server.
//
// Node parameters (what to do on a node's first start) come from qemu's
// fw_cfg, the ESP or a file given on the command line; LoadParameters reads
// them all and refuses sources that disagree.
//
// This package is being built in steps; see docs/architecture.md.
package node

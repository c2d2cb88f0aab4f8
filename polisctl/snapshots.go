package polisctl

import (
	"fmt"
	"io"
	"time"

	cpb "github.com/polis-os/polis/api/curator/v1"
)

// writeSnapshotPolicy says, in cluster info, how the consensus members keep
// their periodic snapshots.
func writeSnapshotPolicy(w io.Writer, p *cpb.SnapshotPolicy) {
	if p == nil {
		return
	}
	fmt.Fprintf(w, "Consensus snapshots:      every %s, the last %d kept on each member's disk\n", p.GetInterval().AsDuration(), p.GetKeep())
}

// writePodNetwork is cluster info's line for the pod network.
func writePodNetwork(w io.Writer, p *cpb.PodNetwork) {
	if p == nil {
		return
	}
	fmt.Fprintf(w, "Pod network:              %s, a /%d for each Kubernetes node\n", p.GetClusterRange(), p.GetNodePrefixLength())
}

// snapshotRows are node describe's lines for the periodic snapshots a
// consensus member keeps, newest first: a heading row, then one
// continuation row (empty key) per snapshot.
func snapshotRows(snaps []*cpb.ConsensusSnapshot) (heading string, lines []string) {
	if len(snaps) == 0 {
		return "none yet", nil
	}
	heading = fmt.Sprintf("%d on the node's disk, newest first", len(snaps))
	for _, s := range snaps {
		lines = append(lines, fmt.Sprintf("%s  revision %d  %s", s.GetTakenAt().AsTime().UTC().Format(time.RFC3339), s.GetRevision(), byteSize(s.GetSize())))
	}
	return heading, lines
}

// byteSize writes n bytes in the largest binary unit that keeps it at or
// above 1.
func byteSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

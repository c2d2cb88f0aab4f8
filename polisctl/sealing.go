package polisctl

import (
	"fmt"

	cpb "github.com/polis-os/polis/api/curator/v1"
)

// sealingName says how a node keeps its data at rest, for node describe:
// "tpm", "software (protects nothing against a copy)", "none", or "-"
// for a node that did not say.
func sealingName(s cpb.DataSealing) string {
	switch s {
	case cpb.DataSealing_DATA_SEALING_UNSPECIFIED:
		return "-"
	case cpb.DataSealing_DATA_SEALING_NONE:
		return "none (the data disk is not encrypted)"
	case cpb.DataSealing_DATA_SEALING_SOFTWARE:
		return "software (protects nothing against a copy of the node's storage)"
	case cpb.DataSealing_DATA_SEALING_TPM:
		return "tpm (data disk encrypted, key and configuration sealed by the machine's TPM)"
	}
	return fmt.Sprintf("unknown (%d)", int32(s))
}

// clusterBoundName says whether a node's data disk is bound to the
// cluster, for node describe.
func clusterBoundName(st *cpb.NodeStatus) string {
	switch {
	case st.GetDataClusterBound():
		return "yes (its key needs the cluster's part: the disk stays locked once the node is deleted)"
	case st.GetDataSealing() == cpb.DataSealing_DATA_SEALING_TPM:
		return "no (the machine's TPM alone unlocks it: a consensus member's, or not bound yet)"
	}
	return "no"
}

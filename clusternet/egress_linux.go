package clusternet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// IPv4 header offsets of the source and destination addresses.
const (
	ipv4SourceOffset      = 12
	ipv4DestinationOffset = 16
)

// SetEgress makes what this node's Pods (podRange) send to an address
// outside the cluster's pod range (clusterRange) leave with the node's
// own address. It replaces the table whole, in one transaction, so a
// rule of other ranges never lingers beside the new one and no packet
// sees the table half-written.
func (k *netlinkKernel) SetEgress(podRange, clusterRange netip.Prefix) error {
	if err := checkEgress(podRange, clusterRange); err != nil {
		return err
	}
	if k.nft == nil {
		return fmt.Errorf("opening nftables: %w", k.nftErr)
	}
	t := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: EgressTable}
	// Adding first makes the deletion succeed whether or not the table
	// was there; the second add starts it empty.
	k.nft.AddTable(t)
	k.nft.DelTable(t)
	k.nft.AddTable(t)
	ch := k.nft.AddChain(&nftables.Chain{
		Name:     egressChain,
		Table:    t,
		Type:     nftables.ChainTypeNAT,
		Hooknum:  nftables.ChainHookPostrouting,
		Priority: nftables.ChainPriorityNATSource,
	})
	k.nft.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: egressRule(podRange, clusterRange)})
	if err := k.nft.Flush(); err != nil {
		return fmt.Errorf("writing nftables table %s: %w", EgressTable, err)
	}
	return nil
}

// ClearEgress deletes the egress table, if there is one. A kernel whose
// nftables cannot be reached has none.
func (k *netlinkKernel) ClearEgress() error {
	if k.nft == nil {
		return nil
	}
	tables, err := k.nft.ListTablesOfFamily(nftables.TableFamilyIPv4)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EPROTONOSUPPORT) {
		return nil // no nf_tables: no table
	}
	if err != nil {
		return fmt.Errorf("listing nftables tables: %w", err)
	}
	if !slices.ContainsFunc(tables, func(t *nftables.Table) bool { return t.Name == EgressTable }) {
		return nil
	}
	k.nft.DelTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: EgressTable})
	if err := k.nft.Flush(); err != nil {
		return fmt.Errorf("deleting nftables table %s: %w", EgressTable, err)
	}
	return nil
}

// egressRule is `ip saddr podRange ip daddr != clusterRange masquerade`.
func egressRule(podRange, clusterRange netip.Prefix) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: ipv4SourceOffset, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: ipv4Mask(podRange), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: podRange.Masked().Addr().AsSlice()},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: ipv4DestinationOffset, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: ipv4Mask(clusterRange), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: clusterRange.Masked().Addr().AsSlice()},
		&expr.Masq{},
	}
}

// ipv4Mask is p's netmask, 4 bytes.
func ipv4Mask(p netip.Prefix) []byte {
	return binary.BigEndian.AppendUint32(nil, ^uint32(0)<<(32-p.Bits()))
}

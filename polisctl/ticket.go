package polisctl

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	cpb "github.com/polis-os/polis/api/curator/v1"
	nodev1 "github.com/polis-os/polis/api/node/v1"
	"github.com/polis-os/polis/localstorage"
)

// ticket is polisctl ticket: the register ticket, shown or written as a
// new node's parameters; ticket rotate replaces it.
func (c *cli) ticket() *cobra.Command {
	var parameters string
	cmd := &cobra.Command{
		Use:   "ticket [--parameters FILE] | ticket rotate",
		Short: "Show the register ticket, or write the parameters of a new node",
		Long: `ticket shows the cluster's register ticket and curators: what a new node
needs to register. With --parameters it writes them instead as node
parameters (a binary NodeParameters with cluster_register, mode 0600),
ready for polis-node --parameters or qemu's fw_cfg. The ticket lets a node
register, not join: it still needs polisctl node approve. Treat it as a
secret all the same; polisctl ticket rotate replaces it.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.withSession(func(s *session) error {
				var resp *cpb.GetRegisterTicketResponse
				err := s.call(cmd.Context(), "getting the register ticket", func(ctx context.Context) (err error) {
					resp, err = s.mgmt.GetRegisterTicket(ctx, &cpb.GetRegisterTicketRequest{})
					return err
				})
				if err != nil {
					return err
				}
				if parameters == "" {
					fmt.Fprintf(cmd.OutOrStdout(), "Register ticket: %s\n", hex.EncodeToString(resp.RegisterTicket))
					return writeClusterInfo(cmd.OutOrStdout(), resp.ClusterDirectory)
				}
				if len(resp.ClusterDirectory.GetCurators()) == 0 {
					return errors.New("the cluster lists no curator yet, so a new node could not find it; wait until the first node's curator has reported itself (polisctl cluster info shows the curators) and try again")
				}
				p := &nodev1.NodeParameters{Cluster: &nodev1.NodeParameters_ClusterRegister{ClusterRegister: &nodev1.ClusterRegister{
					RegisterTicket:   resp.RegisterTicket,
					ClusterDirectory: resp.ClusterDirectory,
				}}}
				// Plain: the node reads them as they are, from fw_cfg or
				// --parameters.
				abs, err := filepath.Abs(parameters)
				if err != nil {
					return fmt.Errorf("--parameters %s: %w", parameters, err)
				}
				if err := (localstorage.File{Path: abs, Secret: true, Plain: true}).WriteProto(p); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "Wrote the parameters of a new node to %s.\n", parameters)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&parameters, "parameters", "", "write node parameters (cluster_register) to this file")
	cmd.AddCommand(c.ticketRotate())
	return cmd
}

// ticketRotate is polisctl ticket rotate.
func (c *cli) ticketRotate() *cobra.Command {
	return &cobra.Command{
		Use:   "rotate",
		Short: "Replace the register ticket, so that copies of the old one register nobody",
		Long: `rotate replaces the cluster's register ticket with a new random one and shows
it. Every node enrolled so far had the old ticket in its parameters, and it
may have leaked elsewhere: after rotate, the old ticket registers nobody.
Nodes already registered or enrolled are not affected; the parameters of
nodes not yet registered must be written again (polisctl ticket
--parameters).`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.withSession(func(s *session) error {
				var resp *cpb.RotateRegisterTicketResponse
				err := s.call(cmd.Context(), "rotating the register ticket", func(ctx context.Context) (err error) {
					resp, err = s.mgmt.RotateRegisterTicket(ctx, &cpb.RotateRegisterTicketRequest{})
					return err
				})
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "New register ticket: %s\n", hex.EncodeToString(resp.RegisterTicket))
				return nil
			})
		},
	}
}

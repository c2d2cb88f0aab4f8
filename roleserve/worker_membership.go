package roleserve

import (
	"context"
	"fmt"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/curator/client"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/event/memory"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/supervisor"
)

// DialFunc makes a connection to the curators from a client
// configuration. The role server uses client.New; it is a field of Config
// only so that tests can hand workers a connection to an in-memory fake
// curator, and check the configuration the membership worker built.
type DialFunc func(client.Config) (*grpc.ClientConn, error)

// workerMembership owns the answer to "how do I reach a curator?": one
// connection per set of credentials, over the local curator (when this
// node runs one) and the cluster directory: it finds the leader among
// them for the calls only the leader serves, and spreads the others
// (Watch, the reads) over every healthy one.
type workerMembership struct {
	*Worker
	credentials  event.ValueWatch[*Credentials]           // reads
	localCurator event.ValueWatch[*cpb.CuratorEndpoint]   // reads
	directory    event.ValueWatch[[]*cpb.CuratorEndpoint] // reads
	membership   event.Value[*ClusterMembership]          // writes

	dial DialFunc
}

func newWorkerMembership(g *Graph, v *Values, dial DialFunc) *workerMembership {
	h := g.Worker("membership")
	if dial == nil {
		dial = client.New
	}
	return &workerMembership{
		Worker:       h,
		credentials:  Reads[*Credentials](h, &v.Credentials),
		localCurator: Reads[*cpb.CuratorEndpoint](h, &v.LocalCurator),
		directory:    Reads[[]*cpb.CuratorEndpoint](h, &v.Directory),
		membership:   Writes[*ClusterMembership](h, &v.Membership),
		dial:         dial,
	}
}

func (w *workerMembership) run(ctx context.Context) error {
	log := supervisor.Logger(ctx)
	in := w.Inputs()
	defer in.Close()
	creds := Input(in, w.credentials, notNil)
	// The local curator is an input like the others: nil while none
	// serves here. Nothing waits for it to serve, and nothing it does
	// touches a working connection: it only changes which curators the
	// connection asks for the leader.
	localCurator := Input(in, w.localCurator, nil)
	dir := Input(in, w.directory, nil)

	// curators is what the connection spreads calls over and searches
	// for the leader: the local
	// curator first, then the directory. It changes under a live
	// connection, so that a curator started here, or one added elsewhere,
	// is found without dialling anew.
	curators := &memory.Value[[]*cpb.CuratorEndpoint]{Name: "membership-curators", Equal: sameEndpoints}
	var conn *grpc.ClientConn
	var connCreds *Credentials
	defer func() {
		if conn != nil {
			// Readers wait for the next run's membership rather than
			// fail against a closed connection.
			w.membership.Set(nil)
			conn.Close()
		}
	}()

	for {
		why, err := in.Wait(ctx)
		if err != nil {
			return err
		}
		local := localCurator.Latest()
		known := dir.Latest()
		if len(known) == 0 && creds.Latest() != nil {
			known = creds.Latest().Curators
		}
		curators.Set(withLocal(local, known))
		if creds.Latest() == connCreds {
			log.Debug("curators changed", zap.Stringer("because", why), zap.Int("curators", len(dir.Latest())), zap.Bool("local", local != nil))
			continue
		}
		c, err := w.connect(log, creds.Latest(), curators)
		if err != nil {
			return err
		}
		log.Info("new membership", zap.Stringer("because", why), zap.String("node", creds.Latest().NodeID), zap.Bool("local_curator", local != nil))
		w.membership.Set(&ClusterMembership{Credentials: creds.Latest(), Curator: c})
		if conn != nil {
			// After the new membership is published, so that no reader
			// is left with nothing but a closed connection.
			conn.Close()
		}
		conn, connCreds = c, creds.Latest()
		supervisor.Signal(ctx, supervisor.SignalHealthy)
	}
}

// connect dials the curators as the node the credentials name.
func (w *workerMembership) connect(log *zap.Logger, creds *Credentials, curators event.ValueWatch[[]*cpb.CuratorEndpoint]) (*grpc.ClientConn, error) {
	verifier, err := identity.NewVerifier(creds.CACertificate)
	if err != nil {
		return nil, fmt.Errorf("cluster CA of the credentials: %w", err)
	}
	tlsCfg, err := identity.NodeClientConfig(verifier, creds.TLSCertificate())
	if err != nil {
		return nil, fmt.Errorf("TLS configuration of %s: %w", creds.NodeID, err)
	}
	conn, err := w.dial(client.Config{Directory: curators, TLS: tlsCfg, Logger: log.Named("client")})
	if err != nil {
		return nil, fmt.Errorf("connecting to the curators: %w", err)
	}
	return conn, nil
}

// withLocal puts the local curator, if any, in front of the directory's,
// without listing it twice.
func withLocal(local *cpb.CuratorEndpoint, dir []*cpb.CuratorEndpoint) []*cpb.CuratorEndpoint {
	if local == nil {
		return dir
	}
	out := []*cpb.CuratorEndpoint{local}
	for _, ep := range dir {
		if ep.GetNodeId() != local.GetNodeId() {
			out = append(out, ep)
		}
	}
	return out
}

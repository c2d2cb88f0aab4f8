package client

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"go.uber.org/zap"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/event"
)

// Config describes how to reach a cluster's curators. New validates it.
type Config struct {
	// Endpoints are curators known in advance, for example from the
	// cluster directory a node was given or from polisctl's
	// configuration. Any one that answers is enough to find the leader;
	// NodeId may be empty.
	Endpoints []*cpb.CuratorEndpoint
	// Directory, if set, is a live list of curators, used together with
	// Endpoints. The node agent feeds it from the cluster directory so
	// that curators added later are found too. A new list does not move
	// the connection away from a leader that works.
	Directory event.ValueWatch[[]*cpb.CuratorEndpoint]
	// TLS is the caller's client configuration: identity.NodeClientConfig,
	// UserClientConfig or KeyHolderClientConfig. It must not set
	// ServerName: each curator is checked against its own name.
	TLS *tls.Config
	// Logger receives leader changes and failed discoveries; nothing is
	// logged if nil.
	Logger *zap.Logger
	// Dialer, if set, opens the TCP connections to curators (addr is
	// IP:port), for example through the proxy into a VM cluster's
	// network; nil dials directly.
	Dialer func(ctx context.Context, addr string) (net.Conn, error)
	// FailFast ends a call that is waiting for a curator as soon as a
	// discovery round reached none at all (every connection refused or
	// failed its handshake), with an error IsUnreachable recognises,
	// instead of retrying until the call's deadline. For a command-line
	// tool, whose user wants to hear at once that the cluster is down;
	// a node agent leaves it off and waits for curators to come back.
	FailFast bool
}

func (c *Config) validate() error {
	var errs []error
	if c.TLS == nil {
		errs = append(errs, errors.New("the TLS field is required"))
	} else if c.TLS.ServerName != "" {
		errs = append(errs, fmt.Errorf("TLS.ServerName is %q: it must be empty, every curator is checked against its own name", c.TLS.ServerName))
	}
	if len(c.Endpoints) == 0 && c.Directory == nil {
		errs = append(errs, errors.New("neither Endpoints nor Directory is set: no curator could ever be found"))
	}
	for i, ep := range c.Endpoints {
		if err := validEndpoint(ep); err != nil {
			errs = append(errs, fmt.Errorf("endpoint %d of Endpoints: %w", i, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("curator client config: %w", err)
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return nil
}

// New returns a connection that sends each RPC where its method is
// served: to the curator leader, or to any healthy curator in turn (see
// the package doc). Like grpc.NewClient it does no I/O: discovery and the
// connections to the curators start with the first RPC.
// Close the connection to release everything it holds.
func New(cfg Config) (*grpc.ClientConn, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return newRouter(cfg).dial()
}

// KeepaliveTime is how long a connection to a curator may be idle before
// the client pings it, and KeepaliveTimeout how long an unanswered ping
// takes to declare the curator gone. The curator allows pings this often
// (see curator.MinClientPingInterval).
const (
	KeepaliveTime    = 10 * time.Second
	KeepaliveTimeout = 5 * time.Second
)

func newRouter(cfg Config) *router {
	r := &router{cfg: cfg, log: cfg.Logger, creds: credentials.NewTLS(cfg.TLS)}
	r.resolutions.Name = "curator-client-resolutions"
	return r
}

func (r *router) dial() (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient(scheme+":///leader",
		grpc.WithResolvers(r),
		grpc.WithDefaultServiceConfig(routerServiceConfig),
		grpc.WithTransportCredentials(r.creds),
		grpc.WithConnectParams(connectParams),
		// A curator that hangs without dropping the connection (a frozen
		// process, a silent network) is noticed by its unanswered pings,
		// which breaks the connection and sends the calls to discovery.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: KeepaliveTime, Timeout: KeepaliveTimeout, PermitWithoutStream: true}),
		grpc.WithChainUnaryInterceptor(r.unary),
		grpc.WithChainStreamInterceptor(r.stream),
		dialOption(r.cfg.Dialer),
	)
	if err != nil {
		return nil, fmt.Errorf("curator client: %w", err)
	}
	return conn, nil
}

// retryable says whether a call that failed with err may be tried again,
// elsewhere. UNAVAILABLE is what a follower answers, what a curator that
// steps down or stops ends its calls with, and what gRPC reports when it
// cannot reach the curator: in every case the request was not acted on, or,
// for a leader that failed half-way, acting on it again is harmless because
// the curator's mutations are idempotent.
func retryable(err error) bool {
	return status.Code(err) == codes.Unavailable
}

// gaveUp is the error of a call whose context ended while it was waiting for
// a curator to serve it. It keeps the context's code, so that callers see
// their own deadline or cancellation, and says what the last attempt ran
// into.
func gaveUp(ctx context.Context, method string, last error) error {
	if ctx.Err() == nil {
		return last
	}
	who := "no curator leader"
	if servedByAny(method) {
		who = "no curator"
	}
	return status.Errorf(status.FromContextError(ctx.Err()).Code(),
		"%s: %s served the call before its context ended (last attempt: %s)", method, who, status.Convert(last).Message())
}

// unreachableRound ends the wait of a failing-fast call (Config.FailFast)
// after a discovery round that reached no curator.
type unreachableRound struct{ round *resolution }

func (e *unreachableRound) Error() string {
	return fmt.Sprintf("no curator reachable: %v", e.round.err)
}

// reasonUnreachable marks the error of a failing-fast call that reached no
// curator, for IsUnreachable.
const (
	errorDomain       = "client.curator.polis-os.io"
	reasonUnreachable = "CURATORS_UNREACHABLE"
)

// unreachable is the error of a failing-fast call that found no curator
// to take it: UNAVAILABLE, saying what the round ran into.
func unreachable(method string, res *resolution) error {
	st := status.Newf(codes.Unavailable, "%s: no curator could be reached: %v", method, res.err)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reasonUnreachable, Domain: errorDomain}); err == nil {
		st = d
	}
	return st.Err()
}

// IsUnreachable reports whether err (or an error it wraps) is the error of
// a call on a connection with Config.FailFast that reached no curator at
// all: every connection was refused, or failed its handshake.
func IsUnreachable(err error) bool {
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return false
	}
	for _, d := range se.GRPCStatus().Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == errorDomain && info.Reason == reasonUnreachable {
			return true
		}
	}
	return false
}

// servedByAny says whether method is declared SERVE_ANY: the balancer
// sends it to any curator, and a failed attempt is retried on another
// without asking who leads.
func servedByAny(method string) bool {
	req, err := cpb.MethodRequirement(method)
	return err == nil && req.ServedByAny()
}

// retryWait is what a failed attempt waits for before the next one.
type retryWait struct {
	r      *router
	method string
	// any is set for SERVE_ANY methods, whose next attempt goes to the
	// next curator in turn: it waits a backoff step, so that a call
	// finding every curator down does not spin. Leader calls wait for a
	// discovery round newer than the attempt (router.refresh).
	any bool
	b   *backoff.ExponentialBackOff
}

func newRetryWait(r *router, method string) *retryWait {
	w := &retryWait{r: r, method: method, any: servedByAny(method)}
	if w.any {
		w.b = &backoff.ExponentialBackOff{
			InitialInterval:     10 * time.Millisecond,
			RandomizationFactor: 0.2,
			Multiplier:          1.6,
			MaxInterval:         time.Second,
		}
		w.b.Reset()
	}
	return w
}

// wait returns once the call may be tried again; an error if its context
// ended first, or an *unreachableRound if the client fails fast and a discovery
// round newer than the failed attempt reached no curator. seen is the
// discovery round before the failed attempt.
func (w *retryWait) wait(ctx context.Context, seen uint64) error {
	if w.r.cfg.FailFast {
		// Both kinds of call hear from the next round whether any
		// curator is there at all.
		res, err := w.r.refresh(ctx, seen)
		if err != nil {
			return err
		}
		if res.unreachable {
			return &unreachableRound{res}
		}
		if !w.any {
			return nil
		}
	}
	if !w.any {
		_, err := w.r.refresh(ctx, seen)
		return err
	}
	t := time.NewTimer(w.b.NextBackOff())
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (r *router) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	w := newRetryWait(r, method)
	var failed error // the last attempt that failed with a reason of its own
	for {
		seen := r.generation()
		err := invoker(ctx, method, req, reply, cc, opts...)
		if endedByContext(ctx, err) {
			if failed = cmp.Or(failed, r.lastRoundError()); failed != nil {
				return gaveUp(ctx, method, failed)
			}
		}
		if !retryable(err) {
			return err
		}
		failed = err
		r.log.Debug("retrying on another curator", zap.String("method", method), zap.Error(err))
		if werr := w.wait(ctx, seen); werr != nil {
			if ur := (*unreachableRound)(nil); errors.As(werr, &ur) {
				return unreachable(method, ur.round)
			}
			return gaveUp(ctx, method, err)
		}
	}
}

// endedByContext says whether err is the call's own context ending during
// an attempt (on a busy machine an attempt may still be connecting when
// the deadline comes). The caller then learns more from the attempt
// before, or discovery's last round, which failed for a reason of its own
// ("connection refused"), than from this one's "context deadline
// exceeded".
func endedByContext(ctx context.Context, err error) bool {
	if ctx.Err() == nil {
		return false
	}
	c := status.Code(err)
	return c == codes.DeadlineExceeded || c == codes.Canceled
}

func (r *router) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	w := newRetryWait(r, method)
	var failed error // as in unary
	for {
		seen := r.generation()
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if endedByContext(ctx, err) {
			if failed = cmp.Or(failed, r.lastRoundError()); failed != nil {
				return nil, gaveUp(ctx, method, failed)
			}
		}
		if err == nil {
			s := &retryStream{r: r, w: w, cur: cs, ctx: ctx, desc: desc, cc: cc, method: method, streamer: streamer, opts: opts, seen: seen}
			// Only a server stream can be replayed: its whole input is
			// one message, sent before anything is received.
			s.replayable = desc.ServerStreams && !desc.ClientStreams
			return s, nil
		}
		if !retryable(err) {
			return nil, err
		}
		failed = err
		if werr := w.wait(ctx, seen); werr != nil {
			if ur := (*unreachableRound)(nil); errors.As(werr, &ur) {
				return nil, unreachable(method, ur.round)
			}
			return nil, gaveUp(ctx, method, err)
		}
	}
}

// retryStream is a stream to the curator its method is routed to. A server
// stream that fails with UNAVAILABLE before its first message is started
// again (on the leader, or on another curator); any other stream that
// fails so gets its error, after which the next call goes to whoever
// leads, or serves, by then.
type retryStream struct {
	r          *router
	w          *retryWait
	ctx        context.Context
	desc       *grpc.StreamDesc
	cc         *grpc.ClientConn
	method     string
	streamer   grpc.Streamer
	opts       []grpc.CallOption
	replayable bool

	mu  sync.Mutex
	cur grpc.ClientStream
	// Replay state, used by RecvMsg only after the request went out.
	seen     uint64
	req      any
	sendDone bool
	received bool
}

func (s *retryStream) current() grpc.ClientStream {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

func (s *retryStream) Header() (metadata.MD, error) { return s.current().Header() }
func (s *retryStream) Trailer() metadata.MD         { return s.current().Trailer() }
func (s *retryStream) Context() context.Context     { return s.current().Context() }

func (s *retryStream) SendMsg(m any) error {
	s.mu.Lock()
	s.req = m
	s.mu.Unlock()
	return s.current().SendMsg(m)
}

func (s *retryStream) CloseSend() error {
	s.mu.Lock()
	s.sendDone = true
	s.mu.Unlock()
	return s.current().CloseSend()
}

func (s *retryStream) RecvMsg(m any) error {
	for {
		err := s.current().RecvMsg(m)
		if err == nil {
			s.mu.Lock()
			s.received = true
			s.mu.Unlock()
			return nil
		}
		if !retryable(err) {
			return err
		}
		s.mu.Lock()
		replay := s.replayable && !s.received && s.sendDone && s.req != nil
		s.mu.Unlock()
		if !replay {
			// The caller has seen part of the stream, and only it
			// knows how to go on; make sure that when it does, it
			// reaches the current leader.
			if !s.w.any {
				s.r.kick()
			}
			return err
		}
		if err := s.restart(err); err != nil {
			return err
		}
	}
}

// restart opens the stream again and sends the request.
func (s *retryStream) restart(cause error) error {
	for {
		if err := s.w.wait(s.ctx, s.seen); err != nil {
			return gaveUp(s.ctx, s.method, cause)
		}
		s.r.log.Debug("restarting a stream on another curator", zap.String("method", s.method), zap.Error(cause))
		s.seen = s.r.generation()
		cs, err := s.streamer(s.ctx, s.desc, s.cc, s.method, s.opts...)
		if err == nil {
			// A send that fails because the stream ended (io.EOF) leaves
			// the reason for RecvMsg to report.
			if err = cs.SendMsg(s.req); err == nil || err == io.EOF {
				err = cs.CloseSend()
			}
			if err == io.EOF {
				err = nil
			}
		}
		if err == nil {
			s.mu.Lock()
			s.cur = cs
			s.mu.Unlock()
			return nil
		}
		if !retryable(err) {
			return err
		}
		cause = err
	}
}

// dialOption applies a Config's Dialer; without one it changes nothing.
func dialOption(d func(context.Context, string) (net.Conn, error)) grpc.DialOption {
	if d == nil {
		return grpc.EmptyDialOption{}
	}
	return grpc.WithContextDialer(d)
}

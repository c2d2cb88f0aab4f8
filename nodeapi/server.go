package nodeapi

import (
	"context"
	"fmt"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	nodev1 "github.com/polis-os/polis/api/node/v1"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/logring"
	"github.com/polis-os/polis/supervisor"
)

// server implements NodeService for one run of the gRPC server.
type server struct {
	nodev1.UnimplementedNodeServiceServer
	cfg  *Config
	tree event.ValueWatch[supervisor.TreeState]
	log  *zap.Logger
}

// logBatch bounds the lines of one LogsResponse.
const logBatch = 500

func (s *server) Logs(req *nodev1.LogsRequest, stream grpc.ServerStreamingServer[nodev1.LogsResponse]) error {
	ring := s.cfg.Logs
	if ring == nil {
		return status.Error(codes.FailedPrecondition, "this node keeps no log lines in memory")
	}
	f, err := logFilter(req)
	if err != nil {
		return err
	}
	var backlog []logring.Entry
	var sub *logring.Subscription
	if req.Follow {
		backlog, sub = ring.Follow(f)
		defer sub.Close()
	} else {
		backlog = ring.Backlog(f)
	}
	if n := int(req.BacklogLimit); n > 0 && len(backlog) > n {
		backlog = backlog[len(backlog)-n:]
	}
	for len(backlog) > logBatch {
		if err := stream.Send(&nodev1.LogsResponse{Entries: logEntries(backlog[:logBatch])}); err != nil {
			return err
		}
		backlog = backlog[logBatch:]
	}
	if err := stream.Send(&nodev1.LogsResponse{Entries: logEntries(backlog), BacklogEnd: true}); err != nil {
		return err
	}
	if sub == nil {
		return nil
	}
	ctx := stream.Context()
	var reported uint64
	for {
		var batch []logring.Entry
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case e := <-sub.C():
			batch = append(batch, e)
		}
		// Take whatever else is waiting, so a burst goes out in one message.
	more:
		for len(batch) < logBatch {
			select {
			case e := <-sub.C():
				batch = append(batch, e)
			default:
				break more
			}
		}
		dropped := sub.Dropped()
		if err := stream.Send(&nodev1.LogsResponse{Entries: logEntries(batch), Dropped: dropped - reported}); err != nil {
			return err
		}
		reported = dropped
	}
}

// logFilter turns a request into a logring.Filter.
func logFilter(req *nodev1.LogsRequest) (logring.Filter, error) {
	f := logring.Filter{Runnable: req.Runnable}
	lvl, ok := zapLevel(req.MinLevel)
	if !ok {
		return f, status.Errorf(codes.InvalidArgument, "min_level %v is not a log level", req.MinLevel)
	}
	f.MinLevel = lvl
	if req.Since != nil {
		if err := req.Since.CheckValid(); err != nil {
			return f, status.Errorf(codes.InvalidArgument, "since: %v", err)
		}
		f.Since = req.Since.AsTime()
	}
	return f, nil
}

// levels maps zap's levels to the API's, in order.
var levels = []struct {
	api nodev1.LogLevel
	zap zapcore.Level
}{
	{nodev1.LogLevel_LOG_LEVEL_DEBUG, zapcore.DebugLevel},
	{nodev1.LogLevel_LOG_LEVEL_INFO, zapcore.InfoLevel},
	{nodev1.LogLevel_LOG_LEVEL_WARN, zapcore.WarnLevel},
	{nodev1.LogLevel_LOG_LEVEL_ERROR, zapcore.ErrorLevel},
	{nodev1.LogLevel_LOG_LEVEL_DPANIC, zapcore.DPanicLevel},
	{nodev1.LogLevel_LOG_LEVEL_PANIC, zapcore.PanicLevel},
	{nodev1.LogLevel_LOG_LEVEL_FATAL, zapcore.FatalLevel},
}

func zapLevel(l nodev1.LogLevel) (zapcore.Level, bool) {
	if l == nodev1.LogLevel_LOG_LEVEL_UNSPECIFIED {
		return zapcore.InfoLevel, true
	}
	for _, m := range levels {
		if m.api == l {
			return m.zap, true
		}
	}
	return 0, false
}

// APILevel is the API's name of a zap level.
func APILevel(l zapcore.Level) nodev1.LogLevel {
	for _, m := range levels {
		if m.zap == l {
			return m.api
		}
	}
	return nodev1.LogLevel_LOG_LEVEL_UNSPECIFIED
}

// ZapLevel is the zap level of an API level; unspecified is info.
func ZapLevel(l nodev1.LogLevel) (zapcore.Level, error) {
	z, ok := zapLevel(l)
	if !ok {
		return 0, fmt.Errorf("%v is not a log level", l)
	}
	return z, nil
}

func logEntries(es []logring.Entry) []*nodev1.LogEntry {
	out := make([]*nodev1.LogEntry, len(es))
	for i, e := range es {
		out[i] = &nodev1.LogEntry{
			Seq:        e.Seq,
			Time:       timestamppb.New(e.Time),
			Level:      APILevel(e.Level),
			Runnable:   e.Logger,
			Message:    e.Message,
			FieldsJson: e.Fields,
			Truncated:  e.Truncated,
		}
	}
	return out
}

func (s *server) GetSupervisorTree(ctx context.Context, _ *nodev1.GetSupervisorTreeRequest) (*nodev1.GetSupervisorTreeResponse, error) {
	// The tree is set before the supervisor starts anything: this does
	// not block.
	t, err := event.Get(ctx, s.tree)
	if err != nil {
		return nil, status.FromContextError(err).Err()
	}
	return &nodev1.GetSupervisorTreeResponse{Runnables: TreeRunnables(t)}, nil
}

// TreeRunnables renders a tree as the API's runnables, parents first.
func TreeRunnables(t supervisor.TreeState) []*nodev1.Runnable {
	var out []*nodev1.Runnable
	for n := range t.All() {
		r := &nodev1.Runnable{
			Name:      n.Name,
			State:     runnableState(n.State),
			Since:     timestamppb.New(n.Since),
			Restarts:  uint32(n.Restarts),
			LastError: n.LastError,
		}
		if !n.Until.IsZero() {
			r.BackoffUntil = timestamppb.New(n.Until)
		}
		out = append(out, r)
	}
	return out
}

func runnableState(s supervisor.State) nodev1.RunnableState {
	switch s {
	case supervisor.StateNew:
		return nodev1.RunnableState_RUNNABLE_STATE_NEW
	case supervisor.StateRunning:
		return nodev1.RunnableState_RUNNABLE_STATE_RUNNING
	case supervisor.StateHealthy:
		return nodev1.RunnableState_RUNNABLE_STATE_HEALTHY
	case supervisor.StateDone:
		return nodev1.RunnableState_RUNNABLE_STATE_DONE
	case supervisor.StateFailed:
		return nodev1.RunnableState_RUNNABLE_STATE_FAILED
	case supervisor.StateBackoff:
		return nodev1.RunnableState_RUNNABLE_STATE_BACKOFF
	case supervisor.StateCancelling:
		return nodev1.RunnableState_RUNNABLE_STATE_CANCELLING
	case supervisor.StateStopped:
		return nodev1.RunnableState_RUNNABLE_STATE_STOPPED
	}
	return nodev1.RunnableState_RUNNABLE_STATE_UNSPECIFIED
}

func (s *server) GetRoleServerGraph(ctx context.Context, _ *nodev1.GetRoleServerGraphRequest) (*nodev1.GetRoleServerGraphResponse, error) {
	if s.cfg.RoleServer == nil {
		return nil, status.Error(codes.FailedPrecondition, "this node runs no role server")
	}
	return s.cfg.RoleServer.Snapshot(), nil
}

func (s *server) Reboot(context.Context, *nodev1.RebootRequest) (*nodev1.RebootResponse, error) {
	if err := s.power(Reboot); err != nil {
		return nil, err
	}
	return &nodev1.RebootResponse{}, nil
}

func (s *server) PowerOff(context.Context, *nodev1.PowerOffRequest) (*nodev1.PowerOffResponse, error) {
	if err := s.power(PowerOff); err != nil {
		return nil, err
	}
	return &nodev1.PowerOffResponse{}, nil
}

func (s *server) power(a PowerAction) error {
	if s.cfg.Power == nil {
		return status.Errorf(codes.Unimplemented, "this node cannot %s itself (no power hook: a node run inside another program)", a)
	}
	s.log.Warn("going down on request", zap.Stringer("action", a))
	s.cfg.Power(a)
	return nil
}

package kubetest

import (
	"context"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// ContainerdHealth serves the standard gRPC health service on a unix
// socket in dir, standing in for containerd's (which kube/kubelet's runner
// asks before it goes on), until the test ends. h starts SERVING; asked
// counts the questions answered.
func ContainerdHealth(t testing.TB, dir string) (socket string, h *health.Server, asked *atomic.Int64) {
	t.Helper()
	socket = filepath.Join(dir, "health.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	asked = new(atomic.Int64)
	s := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		defer asked.Add(1)
		return handler(ctx, req)
	}))
	h = health.NewServer()
	healthpb.RegisterHealthServer(s, h)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = s.Serve(l)
	}()
	t.Cleanup(func() {
		s.Stop()
		<-served
	})
	return socket, h, asked
}

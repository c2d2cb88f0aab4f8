package etcdproxy

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc/metadata"
)

// clientSide is the proxy's end of a client's stream (the server side of
// a gRPC bidirectional stream).
type clientSide[Req, Resp any] interface {
	Context() context.Context
	Recv() (*Req, error)
	Send(*Resp) error
}

// etcdSide is the proxy's end of its stream to etcd.
type etcdSide[Req, Resp any] interface {
	Send(*Req) error
	Recv() (*Resp, error)
	CloseSend() error
}

// forwardStream forwards one client stream as one stream to etcd, opened
// by open: the stream's watch and keep-alive handlers differ only in what
// they do to each message. request sees every request before it goes to
// etcd and may change it, or refuse it with an error that ends both
// streams; response sees every response before it goes to the client.
// The stream ends when etcd ends it, when either side fails, or when the
// client closed its side and etcd answered all.
func forwardStream[Req, Resp any, Up etcdSide[Req, Resp]](stream clientSide[Req, Resp], open func(context.Context) (Up, error), request func(*Req) error, response func(*Resp)) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	// etcd reads "require a leader" and similar flags from the metadata;
	// pass the client's on.
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		ctx = metadata.NewOutgoingContext(ctx, md)
	}
	up, err := open(ctx)
	if err != nil {
		return err
	}

	// Requests: client → etcd, until the client closes its side. The
	// goroutine ends with the handler at the latest: gRPC ends Recv when
	// the handler returns.
	reqErr := make(chan error, 1)
	go func() {
		err := func() error {
			for {
				req, err := stream.Recv()
				if errors.Is(err, io.EOF) {
					return up.CloseSend()
				}
				if err != nil {
					return err
				}
				if err := request(req); err != nil {
					return err
				}
				if err := up.Send(req); err != nil {
					return err
				}
			}
		}()
		reqErr <- err
		if err != nil {
			cancel() // a refused request ends the stream to etcd too
		}
	}()

	// Responses: etcd → client, until either side ends; a request's error
	// is the stream's when it is what ended the stream to etcd.
	for {
		resp, err := up.Recv()
		if err != nil {
			select {
			case rerr := <-reqErr:
				if rerr != nil {
					return rerr
				}
			default:
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		response(resp)
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

package etcdproxy

import (
	"context"
	"fmt"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// leaseSet is the leases granted through one proxy, with the time each
// expires at the latest (granted or last kept-alive TTL from now), so that
// expired ones can be forgotten.
type leaseSet struct {
	mu     sync.Mutex
	expiry map[int64]time.Time
}

// forgetAfter is how long past its expiry a lease is remembered: etcd may
// expire a lease a little later than its TTL says (leader changes extend
// leases), and a client may still name it until then.
const forgetAfter = time.Minute

func newLeaseSet() *leaseSet { return &leaseSet{expiry: make(map[int64]time.Time)} }

// add records lease id as this proxy's for ttl seconds from now, and
// forgets the leases long expired.
func (l *leaseSet) add(id, ttl int64) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for other, exp := range l.expiry {
		if now.After(exp.Add(forgetAfter)) {
			delete(l.expiry, other)
		}
	}
	l.expiry[id] = now.Add(time.Duration(ttl) * time.Second)
}

func (l *leaseSet) remove(id int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.expiry, id)
}

func (l *leaseSet) owns(id int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.expiry[id]
	return ok
}

// check returns nil for no lease (0) or one of this proxy's, and a
// PermissionDenied error for any other.
func (l *leaseSet) check(id int64) error {
	if id == 0 || l.owns(id) {
		return nil
	}
	return status.Error(codes.PermissionDenied, fmt.Sprintf("etcdproxy: lease %x was not granted through this endpoint", id))
}

// leaseServer forwards lease calls to etcd for the leases granted through
// this proxy only; see the package doc.
type leaseServer struct {
	pb.UnimplementedLeaseServer

	upstream pb.LeaseClient
	prefix   string
	leases   *leaseSet
}

func (s *leaseServer) LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	resp, err := s.upstream.LeaseGrant(ctx, r)
	if err != nil {
		return nil, err
	}
	if resp.Error == "" {
		s.leases.add(resp.ID, resp.TTL)
	}
	return resp, nil
}

func (s *leaseServer) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	if err := s.leases.check(r.ID); err != nil {
		return nil, err
	}
	resp, err := s.upstream.LeaseRevoke(ctx, r)
	if err != nil {
		return nil, err
	}
	s.leases.remove(r.ID)
	return resp, nil
}

func (s *leaseServer) LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	if err := s.leases.check(r.ID); err != nil {
		return nil, err
	}
	resp, err := s.upstream.LeaseTimeToLive(ctx, r)
	if err != nil {
		return nil, err
	}
	keys := resp.Keys[:0]
	for _, k := range resp.Keys {
		if rest, ok := unprefixed(s.prefix, k); ok {
			keys = append(keys, rest)
		}
	}
	resp.Keys = keys
	return resp, nil
}

func (s *leaseServer) LeaseLeases(ctx context.Context, r *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	resp, err := s.upstream.LeaseLeases(ctx, r)
	if err != nil {
		return nil, err
	}
	own := resp.Leases[:0]
	for _, l := range resp.Leases {
		if s.leases.owns(l.ID) {
			own = append(own, l)
		}
	}
	resp.Leases = own
	return resp, nil
}

// LeaseKeepAlive forwards one keep-alive stream to etcd, ending it with
// PermissionDenied at the first request for a lease not granted here.
func (s *leaseServer) LeaseKeepAlive(stream pb.Lease_LeaseKeepAliveServer) error {
	return forwardStream(stream,
		func(ctx context.Context) (pb.Lease_LeaseKeepAliveClient, error) {
			return s.upstream.LeaseKeepAlive(ctx)
		},
		func(req *pb.LeaseKeepAliveRequest) error { return s.leases.check(req.ID) },
		func(resp *pb.LeaseKeepAliveResponse) {
			if resp.TTL > 0 {
				s.leases.add(resp.ID, resp.TTL)
			}
		})
}

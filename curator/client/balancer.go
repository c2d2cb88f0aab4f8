package client

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/endpointsharding"
	"google.golang.org/grpc/balancer/pickfirst"
	"google.golang.org/grpc/connectivity"
	// Registers the client side of grpc.health.v1, which the service
	// config below turns on: a curator that is stopping says NOT_SERVING
	// before its connections close, and is left out from then on.
	_ "google.golang.org/grpc/health"
	"google.golang.org/grpc/resolver"

	cpb "github.com/polis-os/polis/api/curator/v1"
)

// How a connection chooses a curator for each call.
//
// The resolver hands the connection every known curator, one endpoint
// each, and marks the one it found leading (leaderAttr). The balancer
// keeps a connection to each (endpointsharding over pick_first, as gRPC's
// round_robin does) and routes every call by its method's declaration
// (curatorv1.MethodRequirement):
//
//   - SERVE_ANY (Watch, GetClusterInfo, GetLeader, ...): round robin over
//     the curators whose connection is READY and healthy;
//   - SERVE_LEADER, and any method that declares nothing (health,
//     reflection): the marked leader only.
//
// A curator counts as healthy while its connection is up and its
// grpc.health.v1 overall status is SERVING (routerServiceConfig).

// balancerName is the load-balancing policy of the connections New
// makes. gRPC has no per-connection balancer option, so it is registered
// globally (init), under a name no other package uses; its only input is
// the state this package's resolver gives it.
const balancerName = "polis_curator_router"

// routerServiceConfig selects the balancer and turns on client-side health
// checks of every curator.
const routerServiceConfig = `{"loadBalancingConfig":[{"` + balancerName + `":{}}],"healthCheckConfig":{"serviceName":""}}`

func init() { balancer.Register(routerBuilder{}) }

// leaderAttr is the key of the endpoint attribute that marks the leader.
type leaderAttr struct{}

// isLeader says whether the resolver marked ep as the leader.
func isLeader(ep resolver.Endpoint) bool {
	v, _ := ep.Attributes.Value(leaderAttr{}).(bool)
	return v
}

type routerBuilder struct{}

func (routerBuilder) Name() string { return balancerName }

func (routerBuilder) Build(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	b := &routeBalancer{}
	b.Balancer = endpointsharding.NewBalancer(&routeClientConn{ClientConn: cc}, opts, balancer.Get(pickfirst.Name).Build, endpointsharding.Options{})
	return b
}

// routeBalancer is endpointsharding with health checks on: one pick_first
// child per curator.
type routeBalancer struct {
	balancer.Balancer
}

func (b *routeBalancer) UpdateClientConnState(s balancer.ClientConnState) error {
	return b.Balancer.UpdateClientConnState(balancer.ClientConnState{ResolverState: pickfirst.EnableHealthListener(s.ResolverState)})
}

// routeClientConn replaces endpointsharding's picker, which spreads every
// call, with one that routes by declaration.
type routeClientConn struct {
	balancer.ClientConn
}

func (c *routeClientConn) UpdateState(s balancer.State) {
	p := &routePicker{}
	for _, ch := range endpointsharding.ChildStatesFromPicker(s.Picker) {
		if isLeader(ch.Endpoint) {
			ch := ch
			p.leader = &ch
		}
		if ch.State.ConnectivityState == connectivity.Ready {
			p.ready = append(p.ready, ch.State.Picker)
		} else {
			p.others = append(p.others, ch)
		}
	}
	if len(p.ready) > 0 {
		// Clients start at different curators, so that a thousand
		// nodes' first streams do not all land on the same one.
		p.next.Store(uint32(rand.IntN(len(p.ready))))
	}
	c.ClientConn.UpdateState(balancer.State{ConnectivityState: s.ConnectivityState, Picker: p})
}

// routePicker routes one state of the connection's curators.
type routePicker struct {
	// leader is the marked leader's child, nil while no leader is known.
	leader *endpointsharding.ChildState
	// ready are the pickers of the curators that are READY (connected and
	// healthy); others the rest.
	ready  []balancer.Picker
	others []endpointsharding.ChildState
	next   atomic.Uint32
}

// errNoLeader fails leader calls while no leader is known. It is not a
// status error: a call that waits for ready waits for the next picker, a
// fail-fast call fails UNAVAILABLE and the interceptors retry it after the
// next discovery round.
var errNoLeader = errors.New("no curator leader is known yet")

func (p *routePicker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	if req, err := cpb.MethodRequirement(info.FullMethodName); err == nil && req.ServedByAny() {
		return p.pickAny(info)
	}
	if p.leader == nil {
		return balancer.PickResult{}, errNoLeader
	}
	switch p.leader.State.ConnectivityState {
	case connectivity.Idle:
		p.leader.ExitIdle()
		return balancer.PickResult{}, balancer.ErrNoSubConnAvailable
	case connectivity.Connecting:
		return balancer.PickResult{}, balancer.ErrNoSubConnAvailable
	}
	// READY, or TRANSIENT_FAILURE, whose picker says why.
	return p.leader.State.Picker.Pick(info)
}

// pickAny spreads the calls any curator serves over the ready ones. With
// none ready, a call waits while some curator is connecting, and fails
// (fail-fast) or waits (wait-for-ready) when every one has failed.
func (p *routePicker) pickAny(info balancer.PickInfo) (balancer.PickResult, error) {
	if n := len(p.ready); n > 0 {
		return p.ready[p.next.Add(1)%uint32(n)].Pick(info)
	}
	var errs []string
	for _, ch := range p.others {
		switch ch.State.ConnectivityState {
		case connectivity.Idle:
			ch.ExitIdle()
			return balancer.PickResult{}, balancer.ErrNoSubConnAvailable
		case connectivity.Connecting:
			return balancer.PickResult{}, balancer.ErrNoSubConnAvailable
		}
		if _, err := ch.State.Picker.Pick(info); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) == 0 {
		return balancer.PickResult{}, errors.New("no curator is known yet")
	}
	return balancer.PickResult{}, fmt.Errorf("no curator is reachable: %s", strings.Join(errs, "; "))
}

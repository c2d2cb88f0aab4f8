package clusternet

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
)

// fakeKernel is an in-memory kernel that behaves like Linux where it
// matters to the reconciler: a device must exist before it is configured,
// must be up before a route points at it, and takes its routes with it
// when deleted.
type fakeKernel struct {
	mu      sync.Mutex
	dev     *device
	devName string
	routes  map[netip.Prefix]route
	// foreign are the destinations of routes someone else added.
	foreign map[netip.Prefix]bool
	// changes counts the calls that changed something.
	changes int
	// fail, when set, makes the named method fail once.
	fail map[string]error
	// failRoute makes every change to a route to the destination fail,
	// for as long as it is set: a route the kernel keeps refusing.
	failRoute map[netip.Prefix]error
	// egress is the egress rule's pod range and cluster range; nil when
	// there is none.
	egress *[2]netip.Prefix
}

func newFakeKernel() *fakeKernel {
	return &fakeKernel{
		routes:    make(map[netip.Prefix]route),
		foreign:   make(map[netip.Prefix]bool),
		fail:      make(map[string]error),
		failRoute: make(map[netip.Prefix]error),
	}
}

func (k *fakeKernel) failing(method string) error {
	if err, ok := k.fail[method]; ok {
		delete(k.fail, method)
		return err
	}
	return nil
}

func (k *fakeKernel) Device(name string) (*device, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.failing("Device"); err != nil {
		return nil, err
	}
	if k.dev == nil || k.devName != name {
		return nil, nil
	}
	d := *k.dev
	d.Peers = maps.Clone(k.dev.Peers)
	d.Addresses = slices.Clone(k.dev.Addresses)
	return &d, nil
}

func (k *fakeKernel) SetAddresses(name string, add, remove []netip.Prefix) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.failing("SetAddresses"); err != nil {
		return err
	}
	if k.dev == nil || k.devName != name {
		return fmt.Errorf("no link %s", name)
	}
	k.dev.Addresses = slices.DeleteFunc(k.dev.Addresses, func(a netip.Prefix) bool { return slices.Contains(remove, a) })
	for _, a := range add {
		if !slices.Contains(k.dev.Addresses, a) {
			k.dev.Addresses = append(k.dev.Addresses, a)
		}
	}
	slices.SortFunc(k.dev.Addresses, comparePrefix)
	k.changes++
	return nil
}

func (k *fakeKernel) SetEgress(podRange, clusterRange netip.Prefix) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.failing("SetEgress"); err != nil {
		return err
	}
	if err := checkEgress(podRange, clusterRange); err != nil {
		return err
	}
	k.egress = &[2]netip.Prefix{podRange, clusterRange}
	return nil
}

func (k *fakeKernel) ClearEgress() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.failing("ClearEgress"); err != nil {
		return err
	}
	k.egress = nil
	return nil
}

// egressRule returns the egress rule's ranges; ok is false without one.
func (k *fakeKernel) egressRule() (podRange, clusterRange netip.Prefix, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.egress == nil {
		return netip.Prefix{}, netip.Prefix{}, false
	}
	return k.egress[0], k.egress[1], true
}

func (k *fakeKernel) CreateDevice(name string, mtu int) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.failing("CreateDevice"); err != nil {
		return err
	}
	if k.dev != nil {
		return fmt.Errorf("link %s exists", k.devName)
	}
	k.changes++
	k.dev, k.devName = &device{MTU: mtu, Peers: make(map[Key]wgPeer)}, name
	return nil
}

func (k *fakeKernel) SetMTU(name string, mtu int) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.dev == nil || k.devName != name {
		return errors.New("no such device")
	}
	k.changes++
	k.dev.MTU = mtu
	return nil
}

func (k *fakeKernel) DeleteDevice(name string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.dev == nil || k.devName != name {
		return nil
	}
	k.changes++
	k.dev = nil
	for dst, r := range k.routes {
		if r.Device == name {
			delete(k.routes, dst)
		}
	}
	return nil
}

func (k *fakeKernel) SetUp(name string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.dev == nil || k.devName != name {
		return errors.New("no such device")
	}
	k.changes++
	k.dev.Up = true
	return nil
}

func (k *fakeKernel) ConfigureDevice(name string, c deviceChange) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.failing("ConfigureDevice"); err != nil {
		return err
	}
	if k.dev == nil || k.devName != name {
		return errors.New("no such device")
	}
	k.changes++
	if c.PrivateKey != nil {
		k.dev.PrivateKey = *c.PrivateKey
		// Like WireGuard, a peer with the new key's public half goes.
		delete(k.dev.Peers, c.PrivateKey.PublicKey())
	}
	if c.ListenPort != nil {
		k.dev.ListenPort = *c.ListenPort
	}
	for _, key := range c.Remove {
		delete(k.dev.Peers, key)
	}
	for _, p := range c.Set {
		// Like WireGuard, a peer with the device's own public key is
		// ignored, without an error.
		if !k.dev.PrivateKey.IsZero() && p.PublicKey == k.dev.PrivateKey.PublicKey() {
			continue
		}
		// Like WireGuard, an allowed IP belongs to one peer at a time.
		for key, other := range k.dev.Peers {
			other.AllowedIPs = slices.DeleteFunc(slices.Clone(other.AllowedIPs), func(a netip.Prefix) bool {
				return slices.Contains(p.AllowedIPs, a)
			})
			k.dev.Peers[key] = other
		}
		p.AllowedIPs = slices.Clone(p.AllowedIPs)
		k.dev.Peers[p.PublicKey] = p
	}
	return nil
}

func (k *fakeKernel) Routes() ([]route, []netip.Prefix, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Collect(maps.Values(k.routes)), slices.Collect(maps.Keys(k.foreign)), nil
}

func (k *fakeKernel) AddRoute(r route) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.failing("AddRoute"); err != nil {
		return err
	}
	if err := k.failRoute[r.Dst]; err != nil {
		return err
	}
	if _, ours := k.routes[r.Dst]; ours || k.foreign[r.Dst] {
		return fmt.Errorf("%v already has a route: file exists", r.Dst)
	}
	if r.Device != "" && (k.dev == nil || k.devName != r.Device || !k.dev.Up) {
		return errors.New("network is down")
	}
	k.changes++
	k.routes[r.Dst] = r
	return nil
}

func (k *fakeKernel) ReplaceRoute(r route) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.failing("ReplaceRoute"); err != nil {
		return err
	}
	if err := k.failRoute[r.Dst]; err != nil {
		return err
	}
	if r.Device != "" && (k.dev == nil || k.devName != r.Device || !k.dev.Up) {
		return errors.New("network is down")
	}
	k.changes++
	// Like Linux, a replacement matches a route by destination, not by
	// who added it: someone else's route becomes this one.
	delete(k.foreign, r.Dst)
	k.routes[r.Dst] = r
	return nil
}

func (k *fakeKernel) DeleteRoute(r route) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.failRoute[r.Dst]; err != nil {
		return err
	}
	if _, ok := k.routes[r.Dst]; ok {
		k.changes++
		delete(k.routes, r.Dst)
	}
	return nil
}

func (k *fakeKernel) changeCount() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.changes
}

// state is the kernel's device (nil: none) and routes, for comparing.
func (k *fakeKernel) state() (*device, map[netip.Prefix]route) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var d *device
	if k.dev != nil {
		c := *k.dev
		c.Peers = maps.Clone(k.dev.Peers)
		c.Addresses = slices.Clone(k.dev.Addresses)
		d = &c
	}
	return d, maps.Clone(k.routes)
}

package pid1

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/polis-os/polis/localstorage"
	"github.com/polis-os/polis/node/diskseal"
)

// newDisk writes a first header (unbound, software-sealed) to a file
// standing for the data disk, as createDataDisk does, and returns the
// DataDisk and its parts.
func newDisk(t *testing.T) (d *DataDisk, key, local []byte) {
	t.Helper()
	dev := filepath.Join(t.TempDir(), "data.img")
	if err := os.WriteFile(dev, make([]byte, diskseal.DataOffset), 0o600); err != nil {
		t.Fatal(err)
	}
	key, local = diskseal.NewDataKey(), diskseal.NewPart()
	h := &diskseal.Header{Sealing: diskseal.SealingSoftware, State: diskseal.StateReady, SealedLocal: local}
	if err := h.Wrap(key, local, nil); err != nil {
		t.Fatal(err)
	}
	found, err := writeHeader(dev, diskseal.Found{Slot: 1}, h)
	if err != nil {
		t.Fatal(err)
	}
	return &DataDisk{dev: dev, found: found, key: bytes.Clone(key), local: bytes.Clone(local)}, key, local
}

// onDisk reads the header back from the disk.
func onDisk(t *testing.T, d *DataDisk) diskseal.Found {
	t.Helper()
	area, err := readHead(d.dev)
	if err != nil {
		t.Fatal(err)
	}
	f, err := diskseal.Read(area)
	if err != nil {
		t.Fatal(err)
	}
	if f.Stale {
		t.Fatalf("both header slots are whole after a rewrite (generations %d): the old one was not wiped", f.Header.Generation)
	}
	return f
}

// TestBindUnbind: binding rewrites the header in the other slot, wipes the
// old one, and the key then opens only with the cluster part; binding
// again with the same part changes nothing, with another is refused;
// unbinding goes back to the local part alone; the data key never
// changes. After the halt (forget), nothing is rewrapped.
func TestBindUnbind(t *testing.T) {
	d, key, local := newDisk(t)
	part := diskseal.NewPart()
	if f := onDisk(t, d); f.Slot != 0 || f.Header.Generation != 1 || f.Header.ClusterBound || d.ClusterBound() {
		t.Fatalf("the new disk: slot %d generation %d bound %v", f.Slot, f.Header.Generation, f.Header.ClusterBound)
	}
	if err := d.Bind(part); err != nil {
		t.Fatal(err)
	}
	f := onDisk(t, d)
	if f.Slot != 1 || f.Header.Generation != 2 || !f.Header.ClusterBound || !d.ClusterBound() {
		t.Fatalf("bound: slot %d generation %d bound %v", f.Slot, f.Header.Generation, f.Header.ClusterBound)
	}
	if got, err := f.Header.Unwrap(local, part); err != nil || !bytes.Equal(got, key) {
		t.Fatalf("the bound disk's key with both parts: %v", err)
	}
	if _, err := f.Header.Unwrap(local, nil); err == nil {
		t.Fatal("the bound disk opens with the local part alone")
	}
	if err := d.Bind(bytes.Clone(part)); err != nil {
		t.Fatalf("binding again with the same part: %v", err)
	}
	if g := onDisk(t, d).Header.Generation; g != 2 {
		t.Fatalf("binding again with the same part rewrote the header (generation %d)", g)
	}
	if err := d.Bind(diskseal.NewPart()); err == nil {
		t.Fatal("a bound disk was bound to another part")
	}
	if err := d.Unbind(); err != nil {
		t.Fatal(err)
	}
	f = onDisk(t, d)
	if f.Slot != 0 || f.Header.Generation != 3 || f.Header.ClusterBound || d.ClusterBound() {
		t.Fatalf("unbound: slot %d generation %d bound %v", f.Slot, f.Header.Generation, f.Header.ClusterBound)
	}
	if got, err := f.Header.Unwrap(local, nil); err != nil || !bytes.Equal(got, key) {
		t.Fatalf("the unbound disk's key with the local part: %v", err)
	}
	if err := d.Unbind(); err != nil || onDisk(t, d).Header.Generation != 3 {
		t.Fatalf("unbinding an unbound disk: %v, generation %d", err, onDisk(t, d).Header.Generation)
	}
	d.forget()
	if err := d.Bind(part); err == nil {
		t.Fatal("after the halt cleared the keys, Bind rewrapped")
	}
	if onDisk(t, d).Header.Generation != 3 {
		t.Fatal("after the halt cleared the keys, the header changed")
	}
}

// TestBindConcurrent: Bind and Unbind from several goroutines leave one
// whole header, never both slots (the data disk's lock serialises them).
func TestBindConcurrent(t *testing.T) {
	d, _, _ := newDisk(t)
	part := diskseal.NewPart()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			if i%2 == 0 {
				d.Bind(part)
			} else {
				d.Unbind()
			}
		})
	}
	wg.Wait()
	if f := onDisk(t, d); f.Header.ClusterBound != d.ClusterBound() {
		t.Fatalf("the disk says bound %v, its DataDisk %v", f.Header.ClusterBound, d.ClusterBound())
	}
}

// TestClusterPartWaits: while no curator answers, PID 1 asks again and
// says so on the console, once per distinct answer; it returns the part
// once one comes.
func TestClusterPartWaits(t *testing.T) {
	var lines []string
	step := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }
	calls := 0
	m := &Machine{StorageRoot: "/polis", requests: make(chan Action, 1), opts: BootOptions{
		ClusterPart: func(ctx context.Context, root string, sealer localstorage.Sealer) ([]byte, error) {
			calls++
			if _, ok := ctx.Deadline(); !ok || root != "/polis" || sealer == nil {
				return nil, fmt.Errorf("asked without a deadline (%v), root %q or sealer %v", ok, root, sealer)
			}
			if calls < 3 {
				return nil, errors.New("no curator answers")
			}
			return []byte("the part"), nil
		},
	}}
	part, err := m.clusterPart("/dev/vdb", step)
	if err != nil || string(part) != "the part" || calls != 3 {
		t.Fatalf("clusterPart = %q, %v after %d calls", part, err, calls)
	}
	if len(lines) != 2 || !strings.HasPrefix(lines[0], ClusterPartWaitingMessage) || !strings.Contains(lines[0], "no curator answers") || !strings.Contains(lines[1], "came at attempt 3") {
		t.Fatalf("console lines:\n%s", strings.Join(lines, "\n"))
	}

	m.opts.ClusterPart = nil
	if _, err := m.clusterPart("/dev/vdb", step); err == nil {
		t.Fatal("without a way to ask, clusterPart did not fail")
	}
}

package pid1

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/google/go-tpm/tpm2/transport/linuxtpm"

	"github.com/polis-os/polis/internal/devmapper"
	"github.com/polis-os/polis/localstorage"
	"github.com/polis-os/polis/node/diskseal"
)

// DataMapping is the name of the data disk's dm-crypt mapping
// (/dev/mapper/polis-data).
const DataMapping = "polis-data"

// Data disk sealing, as Machine.DataSealing reports it.
const (
	// DataSealingNone: a plain ext4 data disk from before sealing,
	// mounted as it is; nothing on it is encrypted.
	DataSealingNone = "none"
	// DataSealingSoftware: encrypted, the key in the header in clear
	// (a machine without a TPM).
	DataSealingSoftware = "software"
	// DataSealingTPM: encrypted, the key sealed by the machine's TPM.
	DataSealingTPM = "tpm"
)

// TPMDevice is the kernel's resource-managed TPM device. A machine with a
// TPM 2.0 (a VM started by launch/vm has one, emulated by swtpm) seals
// its data disk's key and its configuration with it.
const TPMDevice = "/dev/tpmrm0"

// tpmWait bounds the wait for TPMDevice when the data disk needs it.
const tpmWait = 10 * time.Second

// Console lines of a data disk bound to its cluster, which tests and
// operators look for.
const (
	// ClusterPartWaitingMessage starts the line PID 1 prints while no
	// curator hands it the data disk's cluster part (none answers yet).
	ClusterPartWaitingMessage = "polis: waiting for the cluster part of the data disk's key"
	// ClusterPartRefusedMessage starts the line PID 1 prints while the
	// cluster refuses the node its cluster part (the node was
	// decommissioned or deleted).
	ClusterPartRefusedMessage = "polis: the cluster refuses this node the cluster part of its data disk's key"
)

// ErrClusterPartRefused is what BootOptions.ClusterPart wraps when the
// cluster refuses the node its part (decommissioned, deleted), as opposed
// to no curator answering: the console says which.
var ErrClusterPartRefused = errors.New("the cluster refuses this node its cluster part")

// How PID 1 asks for the cluster part: each attempt within
// clusterPartTimeout, then again after a wait that grows from
// clusterPartRetryMin to clusterPartRetryMax (to clusterPartRefusedRetry
// once refused: only an operator's restore can change that answer). A
// line that did not change is printed again after clusterPartReprint.
const (
	clusterPartTimeout      = 30 * time.Second
	clusterPartRetryMin     = time.Second
	clusterPartRetryMax     = 15 * time.Second
	clusterPartRefusedRetry = time.Minute
	clusterPartReprint      = time.Minute
)

// BootOptions are what the agent gives Boot.
type BootOptions struct {
	// ClusterPart asks the cluster's curators for this node's cluster
	// part, given the storage root, with only the ESP mounted (the
	// sealed configuration, sealed by sealer, and the saved cluster
	// directory are there). It wraps ErrClusterPartRefused when the
	// cluster refuses. Nil: a data disk bound to its cluster cannot be
	// unlocked.
	ClusterPart func(ctx context.Context, storageRoot string, sealer localstorage.Sealer) ([]byte, error)
}

// DataDisk is the unlocked encrypted data disk, which the agent binds to
// its cluster (Bind) when the node does not run a consensus member, and
// unbinds (Unbind) before it starts one (node/diskseal says why). Each is
// one atomic rewrite of the disk's header; the data is not touched.
type DataDisk struct {
	dev string
	mu  sync.Mutex
	// found is the header on the disk and its slot.
	found diskseal.Found
	// key and local are the data key and the local part, kept to wrap
	// the key again; cleared at halt.
	key, local []byte
}

// DataDisk returns the machine's encrypted data disk; nil when the data
// disk is a plain one from before sealing.
func (m *Machine) DataDisk() *DataDisk { return m.data }

// ClusterBound says whether the disk needs the cluster part to unlock.
func (d *DataDisk) ClusterBound() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.found.Header.ClusterBound
}

// Bind wraps the data key under the local part and the cluster part: from
// the next boot on, the disk unlocks only once a curator hands the node
// its part. Binding a bound disk again with the same part changes nothing;
// with another part, it is refused.
func (d *DataDisk) Bind(clusterPart []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.found.Header.ClusterBound {
		if _, err := d.found.Header.Unwrap(d.local, clusterPart); err != nil {
			return fmt.Errorf("the data disk is bound to another cluster part than the one given: %w", err)
		}
		return nil
	}
	return d.rewrap(clusterPart)
}

// Unbind wraps the data key under the local part alone: the disk unlocks
// without a curator, as a consensus member's must at a cold start.
func (d *DataDisk) Unbind() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.found.Header.ClusterBound {
		return nil
	}
	return d.rewrap(nil)
}

// rewrap writes the header anew with the key wrapped for clusterPart (nil:
// unbound). Called with d.mu held.
func (d *DataDisk) rewrap(clusterPart []byte) error {
	h := *d.found.Header
	if err := h.Wrap(d.key, d.local, clusterPart); err != nil {
		return err
	}
	found, err := writeHeader(d.dev, d.found, &h)
	if err != nil {
		return err
	}
	d.found = found
	return nil
}

// forget clears the keys from memory (at halt).
func (d *DataDisk) forget() {
	d.mu.Lock()
	defer d.mu.Unlock()
	clear(d.key)
	clear(d.local)
	// Nil, not just zeros: a rewrap after this fails rather than wrap a
	// key of zeros.
	d.key, d.local = nil, nil
}

// openSealers finds the machine's TPM, if it has one, and sets
// m.tpm; without one the machine seals in software (m.tpm stays nil).
func (m *Machine) openSealers() error {
	if m.tpm != nil {
		return nil
	}
	if _, err := os.Stat(TPMDevice); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	t, err := linuxtpm.Open(TPMDevice)
	if err != nil {
		return fmt.Errorf("opening the TPM %s: %w", TPMDevice, err)
	}
	m.tpm = &localstorage.TPMSealer{TPM: t}
	return nil
}

// prepareTPM opens the machine's TPM, if it has one by now, and has it
// derive its storage root key in the background, while the machine brings
// up its network and waits for its disks: the data disk's unseal then
// does not wait for the TPM's first, slowest commands.
func (m *Machine) prepareTPM() {
	if err := m.openSealers(); err != nil || m.tpm == nil {
		return // the data disk asks again, and says why
	}
	tpm := m.tpm
	go func() {
		if err := tpm.Prepare(); err != nil {
			m.logf("polis: preparing the TPM: %v (the data disk's unseal tries again)", err)
		}
	}()
}

// Sealer is the sealer of the node's configuration: the TPM's on a
// machine that has one, nil (the agent's default, localstorage.Unsealed)
// on one that has not.
func (m *Machine) Sealer() localstorage.Sealer {
	if m.tpm == nil {
		return nil
	}
	return m.tpm
}

// sealerFor returns the sealer of a header's local part, or an error
// that says why this machine cannot unseal it.
func (m *Machine) sealerFor(dev string, s diskseal.Sealing) (localstorage.Sealer, error) {
	switch s {
	case diskseal.SealingSoftware:
		return localstorage.Unsealed{}, nil
	case diskseal.SealingTPM:
		// The TPM driver may register its device after the disks
		// appeared (a loaded host): give it a moment before calling the
		// TPM missing.
		deadline := time.Now().Add(tpmWait)
		for m.tpm == nil && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond) // polling /dev: no udev to wait on
			if err := m.openSealers(); err != nil {
				return nil, err
			}
		}
		if m.tpm != nil {
			return m.tpm, nil
		}
		return nil, fmt.Errorf("the data disk %s is sealed by a TPM, and this machine has none (no %s after %v). Start the machine with its TPM (launch/vm keeps a VM's TPM state in its directory, beside its disks, under tpm/); nothing was changed on the disk", dev, TPMDevice, tpmWait)
	}
	return nil, fmt.Errorf("the data disk %s: its key is sealed by %v, which this node does not know", dev, s)
}

// newSealer is the sealer of a new disk's local part, and its kind.
func (m *Machine) newSealer() (localstorage.Sealer, diskseal.Sealing) {
	if m.tpm != nil {
		return m.tpm, diskseal.SealingTPM
	}
	// No TPM: the local part lies in the header in clear, and protects
	// nothing against a copy of the disk. The header says so
	// (SealingSoftware), and so does DataSealing.
	return localstorage.Unsealed{}, diskseal.SealingSoftware
}

// openDataDisk unlocks the data disk dev and returns the device to mount
// (the mapping, or dev itself for a plain disk from before sealing) and
// how it is sealed. A blank disk gets a header, a new key and a file
// system; a disk with a header is unlocked (after the cluster part, for
// a disk bound to its cluster) and never formatted once its header says
// StateReady; anything else is refused untouched.
func (m *Machine) openDataDisk(dev string, step func(string, ...any)) (string, string, error) {
	area, err := readHead(dev)
	if err != nil {
		return "", "", err
	}
	found, err := diskseal.Read(area)
	var damaged *diskseal.DamagedError
	switch {
	case errors.As(err, &damaged):
		return "", "", fmt.Errorf("%w. The data disk %s is left as it is: nothing was formatted or written. If the header was damaged, the data cannot be unlocked without it: restore the disk from a copy, or remove the node from the cluster (polisctl node delete) and give it a new data disk to enrol again", err, dev)
	case errors.Is(err, diskseal.ErrNoHeader):
		kind, err := probe(dev)
		if err != nil {
			return "", "", err
		}
		switch kind {
		case "ext4":
			step("the data disk %s is plain ext4 from before sealing: mounted unencrypted", dev)
			return dev, DataSealingNone, nil
		case "blank":
			return m.createDataDisk(dev, step)
		}
		return "", "", fmt.Errorf("the data disk %s (serial %s) holds %s and no Polis header; refusing to format a disk that is not blank", dev, SerialData, kind)
	case err != nil:
		return "", "", err
	}
	h := found.Header
	t := time.Now()
	sealer, err := m.sealerFor(dev, h.Sealing)
	if err != nil {
		return "", "", err
	}
	local, err := sealer.Unseal(h.SealedLocal)
	if errors.Is(err, localstorage.ErrTPMRefused) {
		return "", "", fmt.Errorf("the data disk %s was sealed by another TPM: this machine's TPM refuses its key (the disk comes from another machine, or this machine's TPM state was replaced or cleared). Start the machine with the TPM state it was made with (launch/vm: the tpm/ directory beside its disks); nothing was changed on the disk: %w", dev, err)
	}
	if err != nil {
		return "", "", fmt.Errorf("the data disk %s: its key's local part (sealed: %v) cannot be unsealed on this machine: %w. Nothing was changed on the disk", dev, h.Sealing, err)
	}
	unsealed := time.Since(t)
	var cluster []byte
	bound := ""
	if h.ClusterBound {
		tc := time.Now()
		if cluster, err = m.clusterPart(dev, step); err != nil {
			clear(local)
			return "", "", err
		}
		defer clear(cluster)
		// The wait for a curator is not the unlock's own time.
		t = t.Add(time.Since(tc))
		bound = fmt.Sprintf(", bound to its cluster: the cluster part came in %v", time.Since(tc).Round(time.Millisecond))
	}
	key, err := h.Unwrap(local, cluster)
	if errors.Is(err, diskseal.ErrWrongKey) && h.ClusterBound {
		clear(local)
		return "", "", fmt.Errorf("the data disk %s: the cluster part the curator handed this node does not open its key, though this machine's TPM unsealed the local part. The cluster's part for this node changed (the cluster was restored from a backup older than this disk's binding?); the data cannot be unlocked: delete the node (polisctl node decommission, node delete) and give the machine new disks to enrol it again. Nothing was changed on the disk", dev)
	}
	if err != nil {
		clear(local)
		return "", "", fmt.Errorf("the data disk %s: unwrapping its key: %w. Nothing was changed on the disk", dev, err)
	}
	m.data = &DataDisk{dev: dev, found: found, key: key, local: local}
	if found.Stale {
		// A crash came between a header rewrite and the wipe of the old
		// slot: wipe it now, before anything else.
		if err := wipeSlot(dev, found.Next()); err != nil {
			return "", "", err
		}
		m.data.found.Stale = false
	}
	mapped, err := m.mapData(dev, key)
	if err != nil {
		return "", "", err
	}
	step("unlocked the data disk %s (%v sealing%s) as %s in %v (the local part unsealed in %v)", dev, h.Sealing, bound, mapped, time.Since(t).Round(time.Millisecond), unsealed.Round(time.Millisecond))
	if h.State == diskseal.StateFormatting {
		// A first boot stopped before its file system was complete:
		// nothing was stored yet.
		if err := m.formatData(mapped, step); err != nil {
			return "", "", err
		}
		return mapped, h.Sealing.String(), nil
	}
	kind, err := probe(mapped)
	if err != nil {
		return "", "", err
	}
	if kind != "ext4" {
		return "", "", fmt.Errorf("the data disk %s unlocked, but holds %s rather than ext4: the key is wrong or the disk damaged. Nothing was formatted", dev, kind)
	}
	return mapped, h.Sealing.String(), nil
}

// clusterPart asks for the data disk's cluster part until a curator hands
// it: it waits and asks again while none answers, and while the cluster
// refuses (an operator may restore the node), saying on the console which
// it is. It changes nothing on the disks. A press of the power button
// meanwhile halts the machine.
func (m *Machine) clusterPart(dev string, step func(string, ...any)) ([]byte, error) {
	if m.opts.ClusterPart == nil {
		return nil, fmt.Errorf("the data disk %s is bound to its cluster, and this agent cannot ask the cluster for its part; nothing was changed on the disk", dev)
	}
	sealer := m.Sealer()
	if sealer == nil {
		sealer = localstorage.Unsealed{}
	}
	wait := clusterPartRetryMin
	var (
		last      string
		printedAt time.Time
	)
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), clusterPartTimeout)
		part, err := m.opts.ClusterPart(ctx, m.StorageRoot, sealer)
		cancel()
		if err == nil {
			if attempt > 1 {
				step("the cluster part of the data disk's key came at attempt %d", attempt)
			}
			return part, nil
		}
		sleep := wait
		var line string
		if errors.Is(err, ErrClusterPartRefused) {
			sleep = clusterPartRefusedRetry
			line = fmt.Sprintf("%s: %v. The data disk %s stays locked, and nothing on it is changed or formatted. If the node was removed on purpose, its data is meant to stay locked: give the machine new disks to enrol it as a new node. Asking again every %v (a restore of the cluster from an older backup may bring the node back)", ClusterPartRefusedMessage, err, dev, sleep)
		} else {
			wait = min(2*wait, clusterPartRetryMax)
			line = fmt.Sprintf("%s: %v. The data disk %s is bound to its cluster: it unlocks once a curator of the cluster answers. If the cluster's consensus members are off, start them; nothing on the disk is changed meanwhile", ClusterPartWaitingMessage, err, dev)
		}
		if line != last || time.Since(printedAt) >= clusterPartReprint {
			step("%s (attempt %d)", line, attempt)
			last, printedAt = line, time.Now()
		}
		timer := time.NewTimer(sleep)
		select {
		case a := <-m.requests:
			timer.Stop()
			m.Halt(a)
		case <-timer.C:
		}
	}
}

// createDataDisk writes a new header with a new data key, local part and
// salt to the blank disk dev, maps it and formats the mapping. A new disk
// is never bound to its cluster: the node has not enrolled yet (the agent
// binds it later).
func (m *Machine) createDataDisk(dev string, step func(string, ...any)) (string, string, error) {
	local := diskseal.NewPart()
	key := diskseal.NewDataKey()
	sealer, kind := m.newSealer()
	sealed, err := sealer.Seal(local)
	if err != nil {
		return "", "", fmt.Errorf("sealing the data disk's key (%v): %w", kind, err)
	}
	h := &diskseal.Header{Sealing: kind, State: diskseal.StateFormatting, SealedLocal: sealed}
	if err := h.Wrap(key, local, nil); err != nil {
		return "", "", err
	}
	// The header goes first, marked formatting: from here on the disk
	// is ours, and a crash before the file system is done formats again.
	found, err := writeHeader(dev, diskseal.Found{Slot: 1}, h)
	if err != nil {
		return "", "", err
	}
	m.data = &DataDisk{dev: dev, found: found, key: key, local: local}
	mapped, err := m.mapData(dev, key)
	if err != nil {
		return "", "", err
	}
	if err := m.formatData(mapped, step); err != nil {
		return "", "", err
	}
	return mapped, h.Sealing.String(), nil
}

// formatData formats the mapping and marks the header ready.
func (m *Machine) formatData(mapped string, step func(string, ...any)) error {
	t := time.Now()
	written, err := formatTimed(mapped, "ext4", "polis-data", m.DiskBench == DiskBenchZeroedJournal)
	if err != nil {
		return err
	}
	synced := time.Now()
	d := m.data
	d.mu.Lock()
	defer d.mu.Unlock()
	h := *d.found.Header
	h.State = diskseal.StateReady
	found, err := writeHeader(d.dev, d.found, &h)
	if err != nil {
		return err
	}
	d.found = found
	step("formatted the encrypted data disk %s (%s, %v sealing) as ext4 in %v (written in %v, synced in %v, the header in %v)", d.dev, devmapper.CryptCipher, h.Sealing,
		time.Since(t).Round(time.Millisecond), written.Round(time.Millisecond), synced.Sub(t.Add(written)).Round(time.Millisecond), time.Since(synced).Round(time.Millisecond))
	return nil
}

// mapData maps dev's encrypted area with the data key; the mapping is
// removed after the data disk is unmounted (unmountAll).
func (m *Machine) mapData(dev string, key []byte) (string, error) {
	c := devmapper.Crypt{Name: DataMapping, Device: dev, Offset: diskseal.DataOffset / devmapper.SectorSize, Key: key}
	if m.DiskBench == DiskBenchNoWorkqueue {
		c.Options = []string{"no_read_workqueue", "no_write_workqueue"}
	}
	mapped, err := devmapper.CreateCrypt(c)
	if err != nil {
		return "", fmt.Errorf("mapping the data disk %s: %w", dev, err)
	}
	m.mapped = true
	return mapped, nil
}

// readHead reads the header slots of dev.
func readHead(dev string) ([]byte, error) {
	f, err := os.Open(dev)
	if err != nil {
		return nil, fmt.Errorf("reading the data disk's header: %w", err)
	}
	defer f.Close()
	b := make([]byte, diskseal.HeaderArea)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, fmt.Errorf("reading the data disk's header from %s: %w", dev, err)
	}
	return b, nil
}

// writeHeader rewrites the header of dev, found where cur says, as h: h
// goes to the other slot with the next generation and is synced, and only
// then is cur's slot wiped and synced. A crash before the first sync
// leaves cur's header; one between the syncs leaves both, which the next
// boot tells apart by their generations (and wipes the older).
func writeHeader(dev string, cur diskseal.Found, h *diskseal.Header) (diskseal.Found, error) {
	next := diskseal.Found{Header: h, Slot: cur.Next()}
	h.Generation = 1
	if cur.Header != nil {
		h.Generation = cur.Header.Generation + 1
	}
	b, err := h.Encode()
	if err != nil {
		return diskseal.Found{}, err
	}
	if err := writeSynced(dev, b, diskseal.Offset(next.Slot)); err != nil {
		return diskseal.Found{}, fmt.Errorf("writing the data disk's header: %w", err)
	}
	if cur.Header != nil {
		if err := wipeSlot(dev, cur.Slot); err != nil {
			return diskseal.Found{}, err
		}
	}
	return next, nil
}

// wipeSlot zeroes a header slot of dev and syncs it.
func wipeSlot(dev string, slot int) error {
	if err := writeSynced(dev, make([]byte, diskseal.HeaderSize), diskseal.Offset(slot)); err != nil {
		return fmt.Errorf("wiping the data disk's old header: %w", err)
	}
	return nil
}

// writeSynced writes b at off on dev and syncs it.
func writeSynced(dev string, b []byte, off int64) error {
	f, err := os.OpenFile(dev, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		return fmt.Errorf("%s at %d: %w", dev, off, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", dev, err)
	}
	return nil
}

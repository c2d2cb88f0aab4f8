package pid1

import (
	"errors"
	"fmt"
	"io"
	"os"
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

// openSealers finds the machine's TPM, if it has one, and sets
// m.tpm; without one the machine seals in software (m.tpm stays nil).
func (m *Machine) openSealers() error {
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
// system; a disk with a header is unlocked and never formatted once its
// header says StateReady; anything else is refused untouched.
func (m *Machine) openDataDisk(dev string, step func(string, ...any)) (string, string, error) {
	head, err := readHead(dev)
	if err != nil {
		return "", "", err
	}
	h, err := diskseal.Decode(head)
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
	defer clear(local)
	if h.ClusterBound {
		return "", "", fmt.Errorf("the data disk %s needs a cluster part to unlock, which this node cannot ask for yet", dev)
	}
	mapped, err := m.mapData(dev, local, h.Salt)
	if err != nil {
		return "", "", err
	}
	step("unlocked the data disk %s (%v sealing) as %s in %v", dev, h.Sealing, mapped, time.Since(t).Round(time.Millisecond))
	if h.State == diskseal.StateFormatting {
		// A first boot stopped before its file system was complete:
		// nothing was stored yet.
		if err := m.formatData(dev, mapped, h, step); err != nil {
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

// createDataDisk writes a new header with a new local part and salt to
// the blank disk dev, maps it and formats the mapping.
func (m *Machine) createDataDisk(dev string, step func(string, ...any)) (string, string, error) {
	local := diskseal.NewPart()
	defer clear(local)
	sealer, kind := m.newSealer()
	sealed, err := sealer.Seal(local)
	if err != nil {
		return "", "", fmt.Errorf("sealing the data disk's key (%v): %w", kind, err)
	}
	h := &diskseal.Header{Sealing: kind, State: diskseal.StateFormatting, Salt: diskseal.NewSalt(), SealedLocal: sealed}
	// The header goes first, marked formatting: from here on the disk
	// is ours, and a crash before the file system is done formats again.
	if err := writeHeader(dev, h); err != nil {
		return "", "", err
	}
	mapped, err := m.mapData(dev, local, h.Salt)
	if err != nil {
		return "", "", err
	}
	if err := m.formatData(dev, mapped, h, step); err != nil {
		return "", "", err
	}
	return mapped, h.Sealing.String(), nil
}

// formatData formats the mapping and marks the header ready.
func (m *Machine) formatData(dev, mapped string, h *diskseal.Header, step func(string, ...any)) error {
	t := time.Now()
	if err := format(mapped, "ext4", "polis-data"); err != nil {
		return err
	}
	h.State = diskseal.StateReady
	if err := writeHeader(dev, h); err != nil {
		return err
	}
	step("formatted the encrypted data disk %s (%s, %v sealing) as ext4 in %v", dev, devmapper.CryptCipher, h.Sealing, time.Since(t).Round(time.Millisecond))
	return nil
}

// mapData derives the data key and maps dev's encrypted area; the
// mapping is removed after the data disk is unmounted (unmountAll).
func (m *Machine) mapData(dev string, local []byte, salt [diskseal.SaltSize]byte) (string, error) {
	key, err := diskseal.DataKey(local, nil, salt)
	if err != nil {
		return "", err
	}
	defer clear(key)
	mapped, err := devmapper.CreateCrypt(devmapper.Crypt{Name: DataMapping, Device: dev, Offset: diskseal.DataOffset / devmapper.SectorSize, Key: key})
	if err != nil {
		return "", fmt.Errorf("mapping the data disk %s: %w", dev, err)
	}
	m.mapped = true
	return mapped, nil
}

// readHead reads the first header block of dev.
func readHead(dev string) ([]byte, error) {
	f, err := os.Open(dev)
	if err != nil {
		return nil, fmt.Errorf("reading the data disk's header: %w", err)
	}
	defer f.Close()
	b := make([]byte, diskseal.HeaderSize)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, fmt.Errorf("reading the data disk's header from %s: %w", dev, err)
	}
	return b, nil
}

// writeHeader writes h at the start of dev and syncs it.
func writeHeader(dev string, h *diskseal.Header) error {
	b, err := h.Encode()
	if err != nil {
		return err
	}
	f, err := os.OpenFile(dev, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("writing the data disk's header: %w", err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, 0); err != nil {
		return fmt.Errorf("writing the data disk's header to %s: %w", dev, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("syncing the data disk's header on %s: %w", dev, err)
	}
	return nil
}

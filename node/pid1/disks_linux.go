package pid1

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/backend"
	"github.com/diskfs/go-diskfs/disk"
	"github.com/diskfs/go-diskfs/filesystem"
	"github.com/diskfs/go-diskfs/filesystem/ext4"
	"golang.org/x/sys/unix"
)

// diskTimeout bounds the wait for the disks to appear (virtio_blk probes
// asynchronously).
const diskTimeout = 60 * time.Second

// dataInodeRatio is the data disk's bytes per inode. The data disk holds
// etcd's few large files and localstorage's handful of small ones, so one
// inode per 64 KiB (32,768 on the launcher's 2 GiB disk) is plenty; the
// default of one per 8 KiB makes eight times the inode tables, which the
// formatter writes out in full: under TCG that was 1.5-4.5 s of a first
// boot's 3-7.5 s format (docs/benchmarks.md).
const dataInodeRatio = 64 << 10

// blankProbe is how much of a disk must read as zeros for it to count as
// blank. A disk that is neither blank nor a file system we know is never
// formatted: it may hold data that a wrong guess would destroy.
const blankProbe = 1 << 20

// storageDisk is one disk of the node's storage.
type storageDisk struct {
	serial, fstype, label string
	// dir is the mount point under the storage root.
	dir  string
	data string
	// flags are added to every mount's MS_NOSUID|MS_NODEV|MS_NOEXEC.
	flags uintptr
}

// mountStorage mounts the ESP and data disks, formatting blank ones, and
// a tmpfs for the ephemeral part.
func (m *Machine) mountStorage(found map[string]string, step func(string, ...any)) error {
	disks := []storageDisk{
		// The ESP is FAT: owner-only modes (localstorage keeps secrets
		// there), and quiet, because FAT cannot store modes and
		// localstorage's chmod must not fail for it. And synchronous:
		// FAT has no journal, and a machine powered off (or a VM killed)
		// while the kernel holds a write back leaves broken cluster
		// chains, after which the kernel makes the disk read-only. The
		// ESP is written seldom and little (the sealed configuration,
		// parameters, the saved cluster directory), so each write going
		// out before its call returns costs nothing that matters, and
		// narrows that window from the page cache's writeback delay to
		// the write itself.
		{serial: SerialESP, fstype: "vfat", label: "POLIS-ESP", dir: "esp", data: "uid=0,gid=0,fmask=0177,dmask=0077,quiet,codepage=437,iocharset=ascii", flags: unix.MS_SYNCHRONOUS | unix.MS_DIRSYNC},
		{serial: SerialData, fstype: "ext4", label: "polis-data", dir: "data"},
	}
	for _, d := range disks {
		dev, err := diskBySerial(found, d.serial)
		if err != nil {
			return err
		}
		if d.serial == SerialData {
			if err := m.openSealers(); err != nil {
				return err
			}
			// The data disk is encrypted: what is mounted is its
			// dm-crypt mapping (datadisk_linux.go).
			if dev, m.DataSealing, err = m.openDataDisk(dev, step); err != nil {
				return err
			}
		} else if err := formatIfBlank(dev, d, step); err != nil {
			return err
		}
		target := filepath.Join(m.StorageRoot, d.dir)
		if err := os.MkdirAll(target, 0o700); err != nil {
			return fmt.Errorf("mounting %s: %w", dev, err)
		}
		if err := unix.Mount(dev, target, d.fstype, unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC|d.flags, d.data); err != nil {
			return fmt.Errorf("mounting the %s disk %s (%s) on %s: %w", d.dir, dev, d.fstype, target, err)
		}
		m.mounts = append(m.mounts, target)
		if err := os.Chmod(target, 0o700); err != nil && d.fstype != "vfat" {
			return fmt.Errorf("restricting %s to its owner: %w", target, err)
		}
		step("mounted %s (%s) on %s", dev, d.fstype, target)
	}
	eph := m.ephemeralDir()
	if err := os.MkdirAll(eph, 0o700); err != nil {
		return fmt.Errorf("mounting %s: %w", eph, err)
	}
	if err := unix.Mount("tmpfs", eph, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0700"); err != nil {
		return fmt.Errorf("mounting a tmpfs on %s: %w", eph, err)
	}
	m.mounts = append(m.mounts, eph)
	return nil
}

// formatIfBlank formats a blank disk as d says, and refuses a disk that
// holds anything but d's file system.
func formatIfBlank(dev string, d storageDisk, step func(string, ...any)) error {
	kind, err := probe(dev)
	if err != nil {
		return err
	}
	switch {
	case kind == "blank":
		t := time.Now()
		if err := format(dev, d.fstype, d.label); err != nil {
			return err
		}
		step("formatted the blank %s disk %s as %s in %v", d.dir, dev, d.fstype, time.Since(t).Round(time.Millisecond))
	case kind != d.fstype:
		return fmt.Errorf("the %s disk %s (serial %s) holds %s, not %s; refusing to format a disk that is not blank", d.dir, dev, d.serial, kind, d.fstype)
	}
	return nil
}

// Virtio block devices on the PCI bus: qemu's virtio-blk-pci is the
// transitional device 0x1001 by default, 0x1042 when modern-only.
const virtioVendor = "0x1af4"

var virtioBlockDevices = []string{"0x1001", "0x1042"}

// waitForDisks waits until every virtio disk of the machine has been
// probed and returns them by serial number (serial → /dev path). The PCI
// bus is enumerated before init runs, so the devices to wait for are
// known at once; their disks appear once virtio_blk has probed them
// (asynchronously, slowly under TCG). Knowing them all is what lets PID 1
// tell an absent system disk from a late one without a timeout.
func waitForDisks() (map[string]string, error) {
	deadline := time.Now().Add(diskTimeout)
	for {
		disks, pending, err := virtioDisks()
		if err != nil {
			return nil, err
		}
		if pending == 0 {
			return disks, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d of the machine's virtio disks did not appear within %v (is virtio_blk loaded?); found %v", pending, diskTimeout, disks)
		}
		time.Sleep(50 * time.Millisecond) // polling sysfs: nothing to wait on without udev
	}
}

// virtioDisks returns the probed virtio disks by serial, and how many
// virtio block devices on the PCI bus have no disk yet.
func virtioDisks() (map[string]string, int, error) {
	devs, err := filepath.Glob("/sys/bus/pci/devices/*")
	if err != nil {
		return nil, 0, err
	}
	disks := map[string]string{}
	pending := 0
	for _, d := range devs {
		if readTrimmed(filepath.Join(d, "vendor")) != virtioVendor || !slices.Contains(virtioBlockDevices, readTrimmed(filepath.Join(d, "device"))) {
			continue
		}
		blocks, _ := filepath.Glob(filepath.Join(d, "virtio*", "block", "*"))
		if len(blocks) == 0 {
			pending++
			continue
		}
		name := filepath.Base(blocks[0])
		disks[readTrimmed(filepath.Join("/sys/block", name, "serial"))] = "/dev/" + name
	}
	return disks, pending, nil
}

// readTrimmed reads a small sysfs file; "" if it cannot.
func readTrimmed(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// diskBySerial returns the disk with the serial, or an error naming the
// disks the machine has.
func diskBySerial(disks map[string]string, serial string) (string, error) {
	if dev, ok := disks[serial]; ok {
		return dev, nil
	}
	var have []string
	for s, dev := range disks {
		have = append(have, fmt.Sprintf("%s (%s)", dev, s))
	}
	slices.Sort(have)
	return "", fmt.Errorf("no disk with serial %s (qemu: -drive ...,if=virtio,serial=%s); the machine's virtio disks: %v", serial, serial, have)
}

// systemMagic starts a squashfs superblock ("hsqs", little-endian
// 0x73717368).
const systemMagic = "hsqs"

// mountSystem mounts the system disk read-only at SystemRoot, if the
// machine has one, and returns its device and ID ("" and "" if not). A
// disk with the system serial that is not a squashfs is an error: booting
// on without the runtime it should carry would fail later and obscurely.
func (m *Machine) mountSystem(disks map[string]string) (dev, id string, err error) {
	dev, ok := disks[SerialSystem]
	if !ok {
		return "", "", nil
	}
	f, err := os.Open(dev)
	if err != nil {
		return "", "", fmt.Errorf("the system disk %s: %w", dev, err)
	}
	head := make([]byte, len(systemMagic))
	_, err = io.ReadFull(f, head)
	f.Close()
	if err != nil {
		return "", "", fmt.Errorf("the system disk %s: %w", dev, err)
	}
	if string(head) != systemMagic {
		return "", "", fmt.Errorf("the system disk %s (serial %s) is not a squashfs (it starts with %q)", dev, SerialSystem, head)
	}
	if err := os.MkdirAll(SystemRoot, 0o755); err != nil {
		return "", "", fmt.Errorf("mounting the system disk: %w", err)
	}
	if err := unix.Mount(dev, SystemRoot, "squashfs", unix.MS_RDONLY|unix.MS_NODEV|unix.MS_NOSUID, ""); err != nil {
		return "", "", fmt.Errorf("mounting the system disk %s (squashfs) on %s: %w", dev, SystemRoot, err)
	}
	m.mounts = append(m.mounts, SystemRoot)
	b, err := os.ReadFile(SystemIDPath)
	if err != nil {
		return "", "", fmt.Errorf("the system disk %s has no ID: %w", dev, err)
	}
	return dev, strings.TrimSpace(string(b)), nil
}

// probe says what dev holds: "ext4", "vfat", "blank", or a description of
// something else.
func probe(dev string) (string, error) {
	f, err := os.Open(dev)
	if err != nil {
		return "", fmt.Errorf("probing %s: %w", dev, err)
	}
	defer f.Close()
	b := make([]byte, blankProbe)
	n, err := io.ReadFull(f, b)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return "", fmt.Errorf("probing %s: %w", dev, err)
	}
	b = b[:n]
	switch {
	case n >= 1082 && b[1080] == 0x53 && b[1081] == 0xEF:
		return "ext4", nil // the ext superblock's magic, at 1024+56
	case n >= 512 && b[510] == 0x55 && b[511] == 0xAA && (bytes.HasPrefix(b[82:], []byte("FAT32")) || bytes.HasPrefix(b[54:], []byte("FAT"))):
		return "vfat", nil
	case len(bytes.Trim(b, "\x00")) == 0:
		return "blank", nil
	}
	return "an unknown file system or data", nil
}

// format makes a file system on the whole of dev.
func format(dev, fstype, label string) error {
	_, err := formatTimed(dev, fstype, label, false)
	return err
}

// formatTimed is format, and says how long the writing took (the rest
// is the sync). zeroJournal zeroes an ext4 journal, as the formatter does
// by itself, for the disk benchmark's comparison only.
func formatTimed(dev, fstype, label string, zeroJournal bool) (written time.Duration, err error) {
	start := time.Now()
	defer func() {
		if written == 0 {
			written = time.Since(start)
		}
	}()
	d, err := diskfs.Open(dev, diskfs.WithOpenMode(diskfs.ReadWriteExclusive))
	if err != nil {
		return 0, fmt.Errorf("formatting %s: %w", dev, err)
	}
	defer d.Close()
	if fstype == "vfat" {
		_, err = d.CreateFilesystem(disk.FilesystemSpec{Partition: 0, FSType: filesystem.TypeFat32, VolumeLabel: label})
	} else {
		// The journal is left as the disk holds it rather than zeroed
		// (lazyJournal says why it is safe): 64 MiB fewer writes, each
		// through the cipher on the encrypted data disk.
		// go-diskfs formats one string (fmt.Sprintf) per padding bit
		// of every inode bitmap: half a million for the launcher's
		// 2 GiB disk, 25 MB of garbage, on which the collector spends
		// as long as the formatter on a machine's one CPU (twice as
		// fast with it paused, on the host and under TCG:
		// docs/benchmarks.md). The garbage is collected once it runs
		// again.
		defer debug.SetGCPercent(debug.SetGCPercent(-1))
		var storage backend.Storage = &lazyJournal{Storage: d.Backend}
		if zeroJournal {
			storage = d.Backend
		}
		_, err = ext4.Create(storage, d.Size, 0, d.LogicalBlocksize, &ext4.Params{VolumeName: label, InodeRatio: dataInodeRatio})
	}
	if err != nil {
		return 0, fmt.Errorf("formatting %s as %s: %w", dev, fstype, err)
	}
	written = time.Since(start)
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		return written, fmt.Errorf("formatting %s: %w", dev, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return written, fmt.Errorf("formatting %s: syncing: %w", dev, err)
	}
	return written, nil
}

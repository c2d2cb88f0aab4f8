package devmapper

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ControlPath is the device-mapper's control device.
const ControlPath = "/dev/mapper/control"

// SectorSize is the unit of device-mapper tables: 512 bytes, whatever the
// disk's own sector size.
const SectorSize = 512

// ioctlHeaderSize is sizeof(struct dm_ioctl).
const ioctlHeaderSize = int(unsafe.Sizeof(unix.DmIoctl{}))

// targetSpecSize is sizeof(struct dm_target_spec).
const targetSpecSize = int(unsafe.Sizeof(unix.DmTargetSpec{}))

// Crypt describes a dm-crypt mapping of part of a block device.
type Crypt struct {
	// Name is the mapped device's name (/dev/mapper/NAME); at most 127
	// bytes, no "/".
	Name string
	// Device is the block device to map.
	Device string
	// Offset is where the mapped data starts on Device, in sectors: the
	// sectors before it (our header) are not part of the mapping.
	Offset uint64
	// Key is the CryptKeySize-byte key.
	Key []byte
	// Options are dm-crypt's optional table parameters, such as
	// "no_read_workqueue" and "no_write_workqueue" (Linux 5.9: encrypt
	// and decrypt in the caller's context instead of dm-crypt's
	// workqueues); none by default. Each is one word.
	Options []string
}

// Available says whether this kernel has the device-mapper, and why not
// if it has not.
func Available() error {
	if _, err := os.Stat(ControlPath); err == nil {
		return nil
	}
	b, err := os.ReadFile("/proc/misc")
	if err != nil {
		return fmt.Errorf("devmapper: no %s and cannot read /proc/misc: %w", ControlPath, err)
	}
	if !containsWord(string(b), "device-mapper") {
		return fmt.Errorf("devmapper: this kernel has no device-mapper (no %s, none in /proc/misc: load dm_mod)", ControlPath)
	}
	return nil
}

// CreateCrypt maps c.Device from c.Offset to its end through dm-crypt and
// returns the path of the mapped device. A device of that name must not
// exist yet.
func CreateCrypt(c Crypt) (string, error) {
	if err := checkName(c.Name); err != nil {
		return "", err
	}
	for _, o := range c.Options {
		if o == "" || strings.ContainsAny(o, " \t\n\x00") {
			return "", fmt.Errorf("devmapper: %s: the option %q is not one word", c.Name, o)
		}
	}
	if len(c.Key) != CryptKeySize {
		return "", fmt.Errorf("devmapper: %s: the key is %d bytes, %s needs %d", c.Name, len(c.Key), CryptCipher, CryptKeySize)
	}
	size, err := deviceSectors(c.Device)
	if err != nil {
		return "", err
	}
	if size <= c.Offset {
		return "", fmt.Errorf("devmapper: %s: %s has %d sectors, none after the offset %d", c.Name, c.Device, size, c.Offset)
	}
	var st unix.Stat_t
	if err := unix.Stat(c.Device, &st); err != nil {
		return "", fmt.Errorf("devmapper: %s: %w", c.Device, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return "", fmt.Errorf("devmapper: %s is not a block device", c.Device)
	}
	ctl, err := openControl()
	if err != nil {
		return "", err
	}
	defer ctl.Close()

	dev, err := ctl.create(c.Name)
	if err != nil {
		return "", err
	}
	ok := false
	defer func() {
		if !ok {
			_ = ctl.remove(c.Name)
		}
	}()
	// The table: aes-xts-plain64 KEY IV_OFFSET DEVICE OFFSET. The device
	// is named by its number, which needs no device node to be resolved.
	hexKey := make([]byte, hex.EncodedLen(len(c.Key)))
	hex.Encode(hexKey, c.Key)
	params := fmt.Appendf(nil, "%s %s 0 %d:%d %d", CryptCipher, hexKey, unix.Major(st.Rdev), unix.Minor(st.Rdev), c.Offset)
	if len(c.Options) > 0 {
		params = fmt.Appendf(params, " %d %s", len(c.Options), strings.Join(c.Options, " "))
	}
	clear(hexKey)
	err = ctl.loadTable(c.Name, "crypt", size-c.Offset, params)
	clear(params)
	if err != nil {
		return "", err
	}
	if err := ctl.resume(c.Name); err != nil {
		return "", err
	}
	path, err := makeNode(c.Name, dev)
	if err != nil {
		return "", err
	}
	ok = true
	return path, nil
}

// Remove removes the mapped device name and its node. Removing a device
// that does not exist is not an error.
func Remove(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	ctl, err := openControl()
	if err != nil {
		return err
	}
	defer ctl.Close()
	if err := ctl.remove(name); err != nil && !errors.Is(err, unix.ENXIO) {
		return err
	}
	if err := os.Remove(filepath.Join(filepath.Dir(ControlPath), name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("devmapper: removing the node of %s: %w", name, err)
	}
	return nil
}

// Exists says whether a mapped device of that name exists.
func Exists(name string) (bool, error) {
	if err := checkName(name); err != nil {
		return false, err
	}
	ctl, err := openControl()
	if err != nil {
		return false, err
	}
	defer ctl.Close()
	buf := newRequest(name, 0)
	err = ctl.ioctl(unix.DM_DEV_STATUS, buf)
	clear(buf)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ENXIO):
		return false, nil
	}
	return false, fmt.Errorf("devmapper: status of %s: %w", name, err)
}

// control is an open /dev/mapper/control.
type control struct{ f *os.File }

func openControl() (*control, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(ControlPath); err != nil {
		// The kernel has the device-mapper but no node was made (no udev,
		// or a /dev without it): make it from /sys.
		if err := makeControlNode(); err != nil {
			return nil, err
		}
	}
	f, err := os.OpenFile(ControlPath, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("devmapper: %w", err)
	}
	return &control{f: f}, nil
}

func (c *control) Close() error { return c.f.Close() }

// ioctl runs one request, whose buffer starts with a struct dm_ioctl.
func (c *control) ioctl(req uint, buf []byte) error {
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, c.f.Fd(), uintptr(req), uintptr(unsafe.Pointer(&buf[0])))
	if errno != 0 {
		return errno
	}
	return nil
}

// create makes an empty device and returns its device number.
func (c *control) create(name string) (uint64, error) {
	buf := newRequest(name, 0)
	if err := c.ioctl(unix.DM_DEV_CREATE, buf); err != nil {
		if errors.Is(err, unix.EBUSY) {
			return 0, fmt.Errorf("devmapper: creating %s: a device of that name exists already: %w", name, err)
		}
		return 0, fmt.Errorf("devmapper: creating %s: %w", name, err)
	}
	return header(buf).Dev, nil
}

// loadTable loads a one-target table of length sectors into name's
// inactive slot.
func (c *control) loadTable(name, target string, length uint64, params []byte) error {
	// The spec's parameters are NUL-terminated and the next spec (none
	// here) would start 8-byte aligned.
	specLen := (targetSpecSize + len(params) + 1 + 7) &^ 7
	buf := newRequest(name, specLen)
	h := header(buf)
	h.Target_count = 1
	h.Flags |= unix.DM_SECURE_DATA_FLAG
	spec := (*unix.DmTargetSpec)(unsafe.Pointer(&buf[ioctlHeaderSize]))
	spec.Sector_start = 0
	spec.Length = length
	spec.Next = uint32(specLen)
	copy(spec.Target_type[:], target)
	copy(buf[ioctlHeaderSize+targetSpecSize:], params)
	err := c.ioctl(unix.DM_TABLE_LOAD, buf)
	clear(buf)
	if err != nil {
		return fmt.Errorf("devmapper: loading the %s table of %s (is dm_crypt loaded, with %s?): %w", target, name, CryptCipher, err)
	}
	return nil
}

// resume makes the loaded table live.
func (c *control) resume(name string) error {
	buf := newRequest(name, 0)
	if err := c.ioctl(unix.DM_DEV_SUSPEND, buf); err != nil {
		return fmt.Errorf("devmapper: activating %s: %w", name, err)
	}
	return nil
}

// remove removes the device.
func (c *control) remove(name string) error {
	buf := newRequest(name, 0)
	if err := c.ioctl(unix.DM_DEV_REMOVE, buf); err != nil {
		return fmt.Errorf("devmapper: removing %s: %w", name, err)
	}
	return nil
}

// newRequest returns a buffer holding a struct dm_ioctl for name followed
// by extra bytes of payload.
func newRequest(name string, extra int) []byte {
	buf := make([]byte, ioctlHeaderSize+extra)
	h := header(buf)
	h.Version = [3]uint32{unix.DM_VERSION_MAJOR, 0, 0}
	h.Data_size = uint32(len(buf))
	h.Data_start = uint32(ioctlHeaderSize)
	copy(h.Name[:], name)
	return buf
}

func header(buf []byte) *unix.DmIoctl { return (*unix.DmIoctl)(unsafe.Pointer(&buf[0])) }

// deviceSectors returns the size of a block device in SectorSize units.
func deviceSectors(dev string) (uint64, error) {
	f, err := os.Open(dev)
	if err != nil {
		return 0, fmt.Errorf("devmapper: %w", err)
	}
	defer f.Close()
	var size uint64
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKGETSIZE64, uintptr(unsafe.Pointer(&size))); errno != 0 {
		return 0, fmt.Errorf("devmapper: the size of %s: %w", dev, errno)
	}
	return size / SectorSize, nil
}

// makeNode makes /dev/mapper/NAME for the device number dev, replacing
// a stale node of that name.
func makeNode(name string, dev uint64) (string, error) {
	dir := filepath.Dir(ControlPath)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("devmapper: %w", err)
	}
	path := filepath.Join(dir, name)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("devmapper: replacing %s: %w", path, err)
	}
	if err := unix.Mknod(path, unix.S_IFBLK|0o600, int(dev)); err != nil {
		return "", fmt.Errorf("devmapper: making %s: %w", path, err)
	}
	return path, nil
}

// makeControlNode makes ControlPath from the misc device's number in /sys.
func makeControlNode() error {
	b, err := os.ReadFile("/sys/class/misc/device-mapper/dev")
	if err != nil {
		return fmt.Errorf("devmapper: no %s and no device number in /sys: %w", ControlPath, err)
	}
	var major, minor uint32
	if _, err := fmt.Sscanf(string(b), "%d:%d", &major, &minor); err != nil {
		return fmt.Errorf("devmapper: /sys/class/misc/device-mapper/dev: %q: %w", b, err)
	}
	if err := os.MkdirAll(filepath.Dir(ControlPath), 0o755); err != nil {
		return fmt.Errorf("devmapper: %w", err)
	}
	if err := unix.Mknod(ControlPath, unix.S_IFCHR|0o600, int(unix.Mkdev(major, minor))); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("devmapper: making %s: %w", ControlPath, err)
	}
	return nil
}

func checkName(name string) error {
	if name == "" || len(name) >= unix.DM_NAME_LEN || name == "." || name == ".." || strings.Contains(name, "/") {
		return fmt.Errorf("devmapper: %q is not a device name (1-%d bytes, no /)", name, unix.DM_NAME_LEN-1)
	}
	return nil
}

// containsWord says whether /proc/misc's text lists name (lines "MINOR NAME").
func containsWord(text, name string) bool {
	for line := range strings.Lines(text) {
		if f := strings.Fields(line); len(f) == 2 && f[1] == name {
			return true
		}
	}
	return false
}

package pid1

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/polis-os/polis/internal/devmapper"
)

// fatalPause is how long a fatal error stays on the console before the
// machine reboots: long enough to be read, short enough that a transient
// failure heals by itself.
const fatalPause = 10 * time.Second

// Halt stops the machine: sync, unmount the storage (newest mount first),
// sync again, then power off or reboot, all within WatchdogHaltTimeout
// of its start if the machine has a watchdog (lastFeed). It does not
// return.
func (m *Machine) Halt(a Action) {
	m.logf("%s: %s", HaltMessage, a)
	lastFeed(m.logf)
	unix.Sync()
	m.unmountAll()
	unix.Sync()
	cmd := unix.LINUX_REBOOT_CMD_POWER_OFF
	if a == Reboot {
		cmd = unix.LINUX_REBOOT_CMD_RESTART
	}
	err := unix.Reboot(cmd)
	// Only reached if the kernel refused; PID 1 must not exit (the kernel
	// would panic), so keep trying the hard way.
	m.logf("polis: reboot(2) failed: %v", err)
	for {
		unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
		time.Sleep(time.Second)
	}
}

// unmountAll unmounts the storage in reverse order; a busy mount is
// detached lazily so that the halt goes on.
func (m *Machine) unmountAll() {
	for i := len(m.mounts) - 1; i >= 0; i-- {
		if err := unix.Unmount(m.mounts[i], 0); err != nil {
			m.logf("polis: unmounting %s: %v; detaching it", m.mounts[i], err)
			unix.Unmount(m.mounts[i], unix.MNT_DETACH)
		}
	}
	m.mounts = nil
	if m.mapped {
		// Unmounted above, the data disk's mapping can go: its key
		// leaves the kernel's memory before the machine halts.
		if err := devmapper.Remove(DataMapping); err != nil {
			m.logf("polis: removing the data disk's mapping: %v", err)
		}
		m.mapped = false
	}
	if m.data != nil {
		m.data.forget()
	}
}

// Fatal prints err on the console, waits fatalPause, and reboots. PID 1
// must never exit: the kernel would panic, and a panicked machine under
// qemu -no-reboot just stops, with the reason far up the console.
func Fatal(logf func(string, ...any), err error) {
	logf("%s: %v", FatalMessage, err)
	logf("%s: reboot in %v", HaltMessage, fatalPause)
	lastFeed(logf)
	unix.Sync()
	time.Sleep(fatalPause)
	unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
	for {
		time.Sleep(time.Hour)
	}
}

// Input event constants (linux/input-event-codes.h).
const (
	evKey    = 0x01
	keyPower = 116
	// inputEventSize is sizeof(struct input_event) on 64-bit: a timeval
	// (16 bytes), type, code (2 each) and value (4).
	inputEventSize = 24
)

// watchPowerButton turns a press of the ACPI power button (qemu's
// system_powerdown) into a power-off request. Every input device is
// watched: the button's event device number depends on probe order.
func (m *Machine) watchPowerButton() {
	devs, _ := filepath.Glob("/dev/input/event*")
	if len(devs) == 0 {
		// The button and evdev modules may still be probing; look again.
		for range 100 {
			time.Sleep(100 * time.Millisecond)
			if devs, _ = filepath.Glob("/dev/input/event*"); len(devs) > 0 {
				break
			}
		}
	}
	if len(devs) == 0 {
		m.logf("polis: no input devices: the power button will not work")
		return
	}
	for _, d := range devs {
		go m.watchInput(d)
	}
}

func (m *Machine) watchInput(dev string) {
	f, err := os.Open(dev)
	if err != nil {
		m.logf("polis: watching %s for the power button: %v", dev, err)
		return
	}
	defer f.Close()
	ev := make([]byte, inputEventSize)
	for {
		if _, err := f.Read(ev); err != nil {
			m.logf("polis: reading %s: %v", dev, err)
			return
		}
		typ := binary.NativeEndian.Uint16(ev[16:])
		code := binary.NativeEndian.Uint16(ev[18:])
		value := int32(binary.NativeEndian.Uint32(ev[20:]))
		if typ == evKey && code == keyPower && value == 1 {
			m.logf("polis: power button pressed")
			select {
			case m.requests <- PowerOff:
			default: // a request is already pending
			}
		}
	}
}

// Request asks for the machine to be powered off or rebooted once the agent
// has stopped, as the power button does; the node API's Reboot and PowerOff
// come through here. A request while another is pending is dropped: the
// first one decides.
func (m *Machine) Request(a Action) {
	select {
	case m.requests <- a:
	default:
	}
}

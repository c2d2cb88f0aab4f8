package watchdog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// DevicePath is the first watchdog device the kernel's watchdog core
// makes. /dev/watchdog, its legacy name, is the same device.
const DevicePath = "/dev/watchdog0"

// Device is an armed watchdog: until Disarm, it resets the machine if
// nothing feeds it for Timeout.
type Device struct {
	f        *os.File
	identity string
	timeout  time.Duration
}

// Open arms the watchdog at path and sets its timeout, in whole seconds
// (at least one); the driver may round it, and Timeout says what it
// took. A machine without the device gets an error wrapping
// fs.ErrNotExist. If the timeout cannot be set, Open disarms the
// watchdog again and returns the error; should the driver refuse that
// too (nowayout), the watchdog runs on at the driver's own timeout, and
// Open returns the Device with the error: whoever opened it must feed
// it, or the machine resets.
func Open(path string, timeout time.Duration) (*Device, error) {
	if timeout < time.Second {
		return nil, fmt.Errorf("watchdog %s: timeout %v: want at least 1s", path, timeout)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("watchdog: %w", err)
	}
	d := &Device{f: f}
	if info, err := unix.IoctlGetWatchdogInfo(int(f.Fd())); err == nil {
		d.identity = unix.ByteSliceToString(info.Identity[:])
	}
	if err := d.SetTimeout(timeout); err != nil {
		if derr := d.Disarm(); derr != nil {
			d.readTimeout(0)
			return d, errors.Join(err, derr)
		}
		return nil, err
	}
	return d, nil
}

// SetTimeout sets the watchdog's timeout, in whole seconds (rounded up,
// at least one; the driver may round it again: Timeout says what it
// took), and feeds it, so that the new timeout counts from now.
func (d *Device) SetTimeout(timeout time.Duration) error {
	secs := max(1, int((timeout+time.Second-1)/time.Second))
	if err := unix.IoctlSetPointerInt(int(d.f.Fd()), unix.WDIOC_SETTIMEOUT, secs); err != nil {
		return fmt.Errorf("watchdog %s: setting its timeout to %ds: %w", d.f.Name(), secs, err)
	}
	d.readTimeout(time.Duration(secs) * time.Second)
	return d.Keepalive()
}

// readTimeout sets Timeout from the driver, or to asked if the driver
// does not say.
func (d *Device) readTimeout(asked time.Duration) {
	d.timeout = asked
	if got, err := unix.IoctlGetInt(int(d.f.Fd()), unix.WDIOC_GETTIMEOUT); err == nil && got > 0 {
		d.timeout = time.Duration(got) * time.Second
	}
}

// Identity is the driver's name for the watchdog ("i6300ESB timer"), or
// "" if it gave none.
func (d *Device) Identity() string { return d.identity }

// Timeout is how long the watchdog waits for a keepalive before it
// resets the machine.
func (d *Device) Timeout() time.Duration { return d.timeout }

// Keepalive feeds the watchdog: its timeout starts again.
func (d *Device) Keepalive() error {
	if err := unix.IoctlWatchdogKeepalive(int(d.f.Fd())); err != nil {
		return fmt.Errorf("watchdog %s: keepalive: %w", d.f.Name(), err)
	}
	return nil
}

// Run feeds the watchdog every interval until ctx ends, then returns
// ctx's error with the watchdog still armed; an interval that is not
// positive is refused at once. A keepalive that fails goes
// to onError (which may be nil) and the next is tried at the next tick:
// if none gets through, the watchdog resets the machine, as it should
// for a machine that can no longer feed it.
func (d *Device) Run(ctx context.Context, interval time.Duration, onError func(error)) error {
	if interval <= 0 {
		return fmt.Errorf("watchdog %s: feeding every %v: want a positive interval", d.f.Name(), interval)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			if err := d.Keepalive(); err != nil && onError != nil {
				onError(err)
			}
		}
	}
}

// Disarm stops the watchdog and closes the device. The stop is asked
// for both ways drivers take it: WDIOS_DISABLECARD, and the magic close
// (a 'V' written before the close). A driver built with nowayout
// refuses, which Disarm reports, leaving the device open and armed: it
// must still be fed.
func (d *Device) Disarm() error {
	d.f.Write([]byte("V")) // also a keepalive; the ioctl's answer decides
	if err := unix.IoctlSetPointerInt(int(d.f.Fd()), unix.WDIOC_SETOPTIONS, unix.WDIOS_DISABLECARD); err != nil {
		return fmt.Errorf("watchdog %s: disarming it (it stays armed): %w", d.f.Name(), err)
	}
	if err := d.f.Close(); err != nil {
		return fmt.Errorf("watchdog %s: closing: %w", d.f.Name(), err)
	}
	return nil
}

package launch

import (
	"errors"
	"testing"
)

// ending is a boot's end as a test states it.
type ending struct{ rebooted, poweredOff, plugPulled, watchdog bool }

func (e ending) GuestRebooted() bool   { return e.rebooted }
func (e ending) GuestPoweredOff() bool { return e.poweredOff }
func (e ending) PlugPulled() bool      { return e.plugPulled }
func (e ending) WatchdogFired() bool   { return e.watchdog }

// TestBootsAgain: what a machine's firmware would boot again after a
// reset is booted again; what the launcher or the guest meant as a stop,
// and a qemu that failed, are not.
func TestBootsAgain(t *testing.T) {
	exited := errors.New("qemu exited with exit status 1")
	stuck := errors.New("qemu had not exited 1m30s after the guest said it was halting")
	for _, c := range []struct {
		name     string
		expected bool
		waitErr  error
		end      ending
		want     bool
	}{
		{"the guest rebooted", false, nil, ending{rebooted: true}, true},
		{"the guest powered off", false, nil, ending{poweredOff: true}, false},
		{"stuck on its way to a reboot, ended", false, stuck, ending{rebooted: true, plugPulled: true}, true},
		{"stuck on its way to a power-off, ended", false, stuck, ending{poweredOff: true, plugPulled: true}, false},
		{"its watchdog reset it", false, nil, ending{watchdog: true}, true},
		{"its watchdog reset it on its way to a reboot", false, nil, ending{rebooted: true, watchdog: true}, true},
		{"its watchdog reset it on its way to a power-off", false, nil, ending{poweredOff: true, watchdog: true}, false},
		{"a panic, or qemu ended without a word", false, nil, ending{}, false},
		{"qemu failed after the guest's reboot line", false, exited, ending{rebooted: true}, false},
		{"qemu failed", false, exited, ending{}, false},
		{"the launcher stopped it as it rebooted", true, nil, ending{rebooted: true}, false},
		{"the launcher stopped it as its watchdog fired", true, nil, ending{watchdog: true}, false},
	} {
		if got := bootsAgain(c.expected, c.waitErr, c.end); got != c.want {
			t.Errorf("%s: bootsAgain = %v, want %v", c.name, got, c.want)
		}
	}
}

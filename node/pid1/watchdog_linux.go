package pid1

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/polis-os/polis/internal/watchdog"
)

// armWatchdog arms the machine's hardware watchdog, if it has one, and
// feeds it every WatchdogInterval for as long as PID 1 runs: through the
// boot (a wait for a curator included), the agent's life and the halt,
// up to reboot(2), after which the watchdog core leaves it counting
// (ModuleParameters). If PID 1 stops being scheduled, the kernel under it
// wedges, or the halt never ends, the machine is reset WatchdogTimeout
// later. It returns what PID 1's summary line says of it. A machine
// without one boots as before; one whose watchdog will not arm says why
// and boots without it, since a node that runs unwatched is better than
// none.
func (m *Machine) armWatchdog() string {
	d, err := watchdog.Open(watchdog.DevicePath, WatchdogTimeout)
	if errors.Is(err, fs.ErrNotExist) {
		return "no hardware watchdog"
	}
	if err != nil {
		m.logf("polis: the hardware watchdog: %v; going on without it", err)
		return "hardware watchdog not armed"
	}
	go d.Run(context.Background(), WatchdogInterval, func(err error) { m.logf("polis: %v", err) })
	return fmt.Sprintf("watchdog %q armed (timeout %v)", d.Identity(), d.Timeout())
}

package pid1

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"time"

	"github.com/polis-os/polis/internal/watchdog"
)

// machineWatchdog is the machine's hardware watchdog once PID 1 armed it:
// one per machine, as PID 1 is, and reached from Halt and from Fatal,
// which a boot that failed before it had a Machine calls too.
var machineWatchdog struct {
	mu      sync.Mutex
	d       *watchdog.Device // nil: none, or not armed
	stop    context.CancelFunc
	stopped chan struct{} // closed when the feeding has stopped
}

// armWatchdog arms the machine's hardware watchdog, if it has one, and
// feeds it every WatchdogInterval (more often if the driver took a
// shorter timeout) until the halt (lastFeed). If PID 1 stops being
// scheduled or the kernel under it wedges, the machine is reset
// WatchdogTimeout later. It returns what PID 1's summary line says of
// it. A machine without one boots as before; one whose watchdog will not
// arm says why and boots without it (a node that runs unwatched is
// better than none), unless the watchdog would not disarm either: then
// it runs at the driver's timeout and is fed all the same.
func armWatchdog(logf func(string, ...any)) string {
	d, err := watchdog.Open(watchdog.DevicePath, WatchdogTimeout)
	if errors.Is(err, fs.ErrNotExist) {
		return "no hardware watchdog"
	}
	if err != nil {
		logf("polis: the hardware watchdog: %v", err)
		if d == nil {
			return "hardware watchdog not armed"
		}
	}
	// At least three keepalives per timeout, whatever the driver took
	// (in whole seconds); one that would not say which (a watchdog that
	// refused to disarm) is fed every second.
	interval := time.Second
	if t := d.Timeout(); t > 0 {
		interval = min(WatchdogInterval, t/3)
	}
	ctx, stop := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		d.Run(ctx, interval, func(err error) { logf("polis: %v", err) })
	}()
	w := &machineWatchdog
	w.mu.Lock()
	w.d, w.stop, w.stopped = d, stop, stopped
	w.mu.Unlock()
	return fmt.Sprintf("watchdog %q armed (timeout %v)", d.Identity(), d.Timeout())
}

// lastFeed is the start of a halt: the watchdog gets WatchdogHaltTimeout
// and one last keepalive, and no more. The halt (sync, unmount, reboot(2)
// with the devices' shutdown) must end within it, or the watchdog resets
// the machine; the watchdog core keeps counting through reboot(2)
// (ModuleParameters). Without it a halt that hangs would be fed for ever
// by the feeding goroutine, which runs on while PID 1's main one is stuck.
func lastFeed(logf func(string, ...any)) {
	w := &machineWatchdog
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.d == nil {
		return
	}
	w.stop()
	<-w.stopped
	if err := w.d.SetTimeout(WatchdogHaltTimeout); err != nil {
		logf("polis: %v", err)
	}
	w.d = nil
}

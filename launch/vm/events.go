package vm

import (
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"time"
)

// eventsSocket is the socket of qemu's second QMP monitor, which the
// machine only reads events from. A QMP socket serves one client at a
// time, and PowerOff's commands use the first.
func (c *Config) eventsSocket() string { return filepath.Join(c.Dir, "events.sock") }

// eventsArgs give qemu the second QMP monitor, and the machine its
// hardware watchdog: an i6300esb (Intel's 6300ESB timer, which the node
// image's kernel drives and PID 1 arms), which resets the machine when
// the guest stops feeding it. With -no-reboot the reset ends qemu, and
// the WATCHDOG event on this monitor tells that apart from a guest's
// own reboot or power-off (WatchdogFired).
func (c *Config) eventsArgs() []string {
	return []string{
		"-chardev", "socket,id=events,path=" + c.eventsSocket() + ",server=on,wait=off",
		"-mon", "chardev=events,mode=control",
		"-device", "i6300esb",
		"-action", "watchdog=reset",
	}
}

// eventsDialInterval is how often watchEvents tries the events socket
// while qemu starts: it appears once qemu has read its command line, a
// few milliseconds after the start, long before the guest could do
// anything worth an event.
const eventsDialInterval = 20 * time.Millisecond

// watchEvents reads qemu's QMP events until qemu exits and closes done:
// it notes a watchdog's firing (WatchdogFired) and says so in the
// console log. It gives up connecting when qemu has exited.
func (m *Machine) watchEvents(done chan<- struct{}) {
	defer close(done)
	var conn net.Conn
	for {
		var err error
		if conn, err = net.Dial("unix", m.cfg.eventsSocket()); err == nil {
			break
		}
		select {
		case <-m.exited:
			return
		case <-time.After(eventsDialInterval):
		}
	}
	defer conn.Close()
	err := readQMPEvents(conn, func(name string, data json.RawMessage) {
		if name != "WATCHDOG" {
			return
		}
		var d struct {
			Action string `json:"action"`
		}
		json.Unmarshal(data, &d)
		m.watchdogFired.Store(true)
		fmt.Fprintf(m.logFile, "%s === %s: the guest stopped feeding its hardware watchdog, which fired (action %s): qemu resets the machine, which ends it\n", logTime(), m.cfg.Name, d.Action)
	})
	if err != nil {
		fmt.Fprintf(m.logFile, "%s === %s: reading qemu's events: %v\n", logTime(), m.cfg.Name, err)
	}
}

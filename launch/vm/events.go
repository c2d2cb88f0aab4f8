package vm

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// readQMPEvents speaks QMP on conn as a reader of events: it reads the
// greeting, enters command mode (qmp_capabilities), then hands every
// event to handle until the connection ends. qemu ending the connection
// (its exit) is not an error once the handshake is done; before, it is,
// since no event could have come.
func readQMPEvents(conn io.ReadWriter, handle func(name string, data json.RawMessage)) error {
	r := bufio.NewReader(conn)
	var greeted, ready bool
	for {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
			if !ready {
				return fmt.Errorf("qmp: the monitor closed before the handshake ended (greeted: %v)", greeted)
			}
			return nil
		}
		if err != nil {
			return err
		}
		var msg struct {
			QMP    json.RawMessage `json:"QMP"`
			Event  string          `json:"event"`
			Data   json.RawMessage `json:"data"`
			Return json.RawMessage `json:"return"`
			Error  json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(line, &msg); err != nil {
			return fmt.Errorf("qmp: %q: %w", line, err)
		}
		switch {
		case msg.Event != "":
			handle(msg.Event, msg.Data)
		case !greeted && msg.QMP != nil:
			greeted = true
			if _, err := io.WriteString(conn, "{\"execute\":\"qmp_capabilities\"}\n"); err != nil {
				return fmt.Errorf("qmp_capabilities: %w", err)
			}
		case greeted && !ready && msg.Error != nil:
			return fmt.Errorf("qmp_capabilities: %s", msg.Error)
		case greeted && !ready && msg.Return != nil:
			ready = true
		default:
			return fmt.Errorf("qmp: unexpected %q", line)
		}
	}
}

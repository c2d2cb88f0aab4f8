package vm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// qmpMessage is one line qemu sends on a QMP socket: its greeting (QMP),
// an event, or the answer to a command (Return or Error).
type qmpMessage struct {
	QMP    json.RawMessage `json:"QMP"`
	Event  string          `json:"event"`
	Data   json.RawMessage `json:"data"`
	Return json.RawMessage `json:"return"`
	Error  json.RawMessage `json:"error"`
}

// qmpSession is a QMP connection past its handshake: qemu's greeting
// read, command mode entered (qmp_capabilities, which QMP requires
// before any other command).
type qmpSession struct {
	conn io.ReadWriter
	r    *bufio.Reader
	// onEvent gets the events that arrive; nil drops them.
	onEvent func(qmpMessage)
}

// newQMPSession does the handshake on conn.
func newQMPSession(conn io.ReadWriter, onEvent func(qmpMessage)) (*qmpSession, error) {
	s := &qmpSession{conn: conn, r: bufio.NewReader(conn), onEvent: onEvent}
	m, err := s.read()
	if err != nil {
		return nil, fmt.Errorf("qmp: greeting: %w", err)
	}
	if m.QMP == nil {
		return nil, fmt.Errorf("qmp: greeting: got %s", m.Return)
	}
	if err := s.execute("qmp_capabilities"); err != nil {
		return nil, err
	}
	return s, nil
}

// read returns the next message that is not an event, handing the
// events before it to onEvent.
func (s *qmpSession) read() (qmpMessage, error) {
	for {
		line, err := s.r.ReadBytes('\n')
		if err != nil {
			return qmpMessage{}, err
		}
		var m qmpMessage
		if err := json.Unmarshal(line, &m); err != nil {
			return qmpMessage{}, fmt.Errorf("qmp: %q: %w", line, err)
		}
		if m.Event == "" {
			return m, nil
		}
		if s.onEvent != nil {
			s.onEvent(m)
		}
	}
}

// execute runs a command and waits for its answer.
func (s *qmpSession) execute(command string) error {
	if _, err := fmt.Fprintf(s.conn, "{\"execute\":%q}\n", command); err != nil {
		return fmt.Errorf("qmp %s: %w", command, err)
	}
	m, err := s.read()
	switch {
	case err != nil:
		return fmt.Errorf("qmp %s: %w", command, err)
	case m.Error != nil:
		return fmt.Errorf("qmp %s: %s", command, m.Error)
	case m.Return == nil:
		return fmt.Errorf("qmp %s: no answer but %s", command, m.QMP)
	}
	return nil
}

// qmpCommand runs one command on qemu's QMP socket. Events that arrive
// meanwhile are dropped.
func qmpCommand(ctx context.Context, socket, command string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return fmt.Errorf("qmp %s: %w", command, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	} else {
		conn.SetDeadline(time.Now().Add(30 * time.Second))
	}
	s, err := newQMPSession(conn, nil)
	if err != nil {
		return err
	}
	return s.execute(command)
}

// readQMPEvents hands every event qemu sends on conn to handle until the
// connection ends: qemu's exit, which is not an error once the handshake
// is done (before it, no event could have come, and it is).
func readQMPEvents(conn io.ReadWriter, handle func(name string, data json.RawMessage)) error {
	onEvent := func(m qmpMessage) { handle(m.Event, m.Data) }
	s, err := newQMPSession(conn, onEvent)
	if err != nil {
		return fmt.Errorf("qmp: the events monitor: %w", err)
	}
	m, err := s.read()
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("qmp: unexpected %s%s", m.Return, m.Error)
}

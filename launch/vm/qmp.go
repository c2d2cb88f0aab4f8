package vm

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"time"
)

// qmpCommand runs one command on qemu's QMP socket: the greeting, the
// capabilities handshake QMP requires, then the command. Events that
// arrive in between are skipped.
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
	r := bufio.NewReader(conn)
	read := func() (map[string]json.RawMessage, error) {
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				return nil, err
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(line, &m); err != nil {
				return nil, fmt.Errorf("qmp: %q: %w", line, err)
			}
			if _, ev := m["event"]; !ev {
				return m, nil
			}
		}
	}
	if _, err := read(); err != nil { // the greeting
		return fmt.Errorf("qmp %s: greeting: %w", command, err)
	}
	for _, c := range []string{"qmp_capabilities", command} {
		if _, err := fmt.Fprintf(conn, "{\"execute\":%q}\n", c); err != nil {
			return fmt.Errorf("qmp %s: %w", c, err)
		}
		m, err := read()
		if err != nil {
			return fmt.Errorf("qmp %s: %w", c, err)
		}
		if e, bad := m["error"]; bad {
			return fmt.Errorf("qmp %s: %s", c, e)
		}
	}
	return nil
}

package vm

import (
	"bufio"
	"encoding/json"
	"net"
	"strings"
	"testing"
)

// TestReadQMPEvents plays qemu's side of the events monitor: the
// greeting, the answer to qmp_capabilities, events, then the exit.
func TestReadQMPEvents(t *testing.T) {
	cases := []struct {
		name    string
		answer  string // to qmp_capabilities; "": none, the monitor closes
		events  []string
		want    []string // event names handed over
		wantErr string
	}{
		{
			name:   "watchdog",
			answer: `{"return": {}}`,
			events: []string{
				`{"timestamp": {"seconds": 1, "microseconds": 2}, "event": "WATCHDOG", "data": {"action": "reset"}}`,
				`{"timestamp": {"seconds": 1, "microseconds": 3}, "event": "SHUTDOWN", "data": {"guest": true, "reason": "guest-reset"}}`,
			},
			want: []string{"WATCHDOG:reset", "SHUTDOWN:"},
		},
		{name: "no events", answer: `{"return": {}}`},
		{name: "refused", answer: `{"error": {"class": "GenericError", "desc": "no"}}`, wantErr: "qmp_capabilities"},
		{name: "garbage", answer: `{"return": {}}`, events: []string{`not json`}, wantErr: "not json"},
		{name: "closed before the answer", answer: "", wantErr: "the events monitor: qmp qmp_capabilities: EOF"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ours, qemu := net.Pipe()
			defer ours.Close()
			go func() {
				defer qemu.Close()
				qemu.Write([]byte(`{"QMP": {"version": {"qemu": {"major": 7}}, "capabilities": ["oob"]}}` + "\n"))
				cmd, err := bufio.NewReader(qemu).ReadString('\n')
				if err != nil || !strings.Contains(cmd, `"qmp_capabilities"`) || c.answer == "" {
					return // closed before the handshake: an error
				}
				qemu.Write([]byte(c.answer + "\n"))
				for _, e := range c.events {
					qemu.Write([]byte(e + "\n"))
				}
			}()
			var got []string
			err := readQMPEvents(ours, func(name string, data json.RawMessage) {
				var d struct {
					Action string `json:"action"`
				}
				json.Unmarshal(data, &d)
				got = append(got, name+":"+d.Action)
			})
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("got error %v, want one naming %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, " ") != strings.Join(c.want, " ") {
				t.Errorf("events %q, want %q", got, c.want)
			}
		})
	}
}

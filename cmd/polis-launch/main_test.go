package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// No test leaves a goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Flags that do not apply to the mode asked for are refused before
// anything starts, not silently ignored (issue 26, item 8).
func TestFlagsOfTheOtherMode(t *testing.T) {
	// A cancelled context: whatever gets past the flags stops at once.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--vm", "--first-address", "127.80.0.1"}, "--first-address is for process nodes"},
		{[]string{"--accel", "kvm"}, "--accel is for --vm only"},
		{[]string{"--vm", "--restore-backup", "b"}, "--restore-backup is for process nodes only"},
	} {
		var out, errOut bytes.Buffer
		err := run(ctx, c.args, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("polis-launch %s: %v, want an error containing %q", strings.Join(c.args, " "), err, c.want)
		}
	}
}

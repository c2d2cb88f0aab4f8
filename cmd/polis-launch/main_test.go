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
		{[]string{"--cpus", "2"}, "--cpus is for --vm only"},
		{[]string{"--vm", "--cpus", "65"}, "--cpus 65: want 1 to 64"},
		{[]string{"--vm", "--cpus", "-1"}, "--cpus -1: want 1 to 64"},
	} {
		var out, errOut bytes.Buffer
		err := run(ctx, c.args, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("polis-launch %s: %v, want an error containing %q", strings.Join(c.args, " "), err, c.want)
		}
	}
}

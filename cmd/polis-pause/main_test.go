package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/polis-os/polis/internal/testutil"
)

// asPause makes the test binary behave as polis-pause when the test runs
// it again with this variable set, so the signal tests run the real main
// in a process of its own.
const asPause = "POLIS_PAUSE_TEST_RUN"

func TestMain(m *testing.M) {
	if os.Getenv(asPause) != "" {
		os.Exit(run(func() { os.Stdout.WriteString("ready\n") }))
	}
	goleak.VerifyTestMain(m)
}

func TestStopSignalsExitZero(t *testing.T) {
	for _, sig := range []syscall.Signal{unix.SIGTERM, unix.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			self, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(self)
			cmd.Env = append(os.Environ(), asPause+"=1")
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// Signal only once the signals are caught: before that the
			// signal's default action would end the process, which the
			// test would misread as a failure of run.
			if line, err := bufio.NewReader(stdout).ReadString('\n'); line != "ready\n" {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatalf("first line %q, %v; want ready", line, err)
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("after %v: %v, want exit 0", sig, err)
				}
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-done
				t.Fatalf("still running 30 s after %v", sig)
			}
		})
	}
}

// TestReapCollectsZombies starts children that nobody waits for, lets them
// become zombies, and checks that reap collects every one.
func TestReapCollectsZombies(t *testing.T) {
	var pids []int
	for range 3 {
		pid, err := syscall.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{})
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	for _, pid := range pids {
		waitForState(t, pid, "Z")
	}
	reap()
	for _, pid := range pids {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("child %d is still there after reap (stat: %v)", pid, err)
		}
	}
	reap() // no child left: must return, not block
}

// waitForState polls /proc/PID/stat until the process is in state.
func waitForState(t *testing.T, pid int, state string) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, fmt.Sprintf("process %d in state %s", pid, state), func() error {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			t.Fatal(err)
		}
		// pid (comm) STATE ...: comm may hold spaces, so split after ')'.
		if i := strings.LastIndexByte(string(stat), ')'); i < 0 || !strings.HasPrefix(string(stat[i+1:]), " "+state+" ") {
			return fmt.Errorf("stat: %s", stat)
		}
		return nil
	})
}

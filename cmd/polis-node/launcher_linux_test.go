//go:build linux

package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/launch"
)

// The helper processes of TestRebootedNodeDiesWithLauncher: the test
// binary run again as a launcher, or as a node agent.
const (
	testRoleEnv     = "POLIS_NODE_TEST_ROLE"
	testRebootedEnv = "POLIS_NODE_TEST_REBOOTED"
)

func TestMain(m *testing.M) {
	switch os.Getenv(testRoleEnv) {
	case "launcher":
		testLauncher()
	case "node":
		testNode()
	}
	// The tests themselves leave no goroutine behind.
	goleak.VerifyTestMain(m)
}

// testLauncher starts a node the way package launch does (its own process
// group, SIGKILL on the launcher's death, the launcher's PID in the
// environment), passes its output on, and waits to be killed.
func testLauncher() {
	runtime.LockOSThread() // the parent-death signal follows the forking thread
	cmd := exec.Command(os.Args[0], os.Args[1:]...)
	cmd.Env = append(os.Environ(), testRoleEnv+"=node", fmt.Sprintf("%s=%d", launcherPIDEnv, os.Getpid()))
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	select {}
}

// testNode reboots once the way polis-node does (reexec), from a thread
// other than the first, which carries no parent-death signal; the
// rebooted process starts as main does and reports that it runs.
func testNode() {
	if os.Getenv(testRebootedEnv) == "" {
		os.Setenv(testRebootedEnv, "1")
		done := make(chan error)
		go func() {
			runtime.LockOSThread() // not the first thread: main holds that one
			done <- reexec()
		}()
		fmt.Println("error", <-done)
		os.Exit(1)
	}
	if err := dieWithLauncher(); err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("rebooted", os.Getpid())
	select {}
}

// A node rebooted by exec-ing itself still dies with its launcher when the
// launcher is SIGKILLed (issue 26, item 3): the exec lost the parent-death
// signal the launcher had asked for.
func TestRebootedNodeDiesWithLauncher(t *testing.T) {
	if launcherPIDEnv != launch.LauncherPIDEnv {
		t.Fatalf("polis-node reads %s, the launcher sets %s", launcherPIDEnv, launch.LauncherPIDEnv)
	}
	launcher := exec.Command(os.Args[0], "-test.run=^$")
	launcher.Env = append(os.Environ(), testRoleEnv+"=launcher")
	out, err := launcher.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	launcher.Stderr = os.Stderr
	if err := launcher.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { launcher.Process.Kill(); launcher.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the node's report: %v", err)
	}
	f := strings.Fields(line)
	if len(f) != 2 || f[0] != "rebooted" {
		t.Fatalf("the node reported %q", line)
	}
	pid, _ := strconv.Atoi(f[1])
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })

	if err := launcher.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	launcher.Wait()
	testutil.Eventually(t, 30*time.Second, "the rebooted node ending with its SIGKILLed launcher", func() error {
		if alive(pid) {
			return fmt.Errorf("pid %d still runs", pid)
		}
		return nil
	})
}

// alive reports whether pid runs (a zombie waiting for its new parent to
// reap it does not).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if errors.Is(err, os.ErrNotExist) {
		return false
	}
	if err != nil {
		return true
	}
	// The state follows the command name in parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

package vm

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// TPMStateDir is the directory, under a machine's Dir, that holds its TPM's
// state: the TPM is the machine's, like its disks, and moves with them.
const TPMStateDir = "tpm"

// tpmStartTimeout bounds the wait for swtpm's socket.
const tpmStartTimeout = 30 * time.Second

// tpmSocket is swtpm's control socket, which qemu's TPM emulator backend
// connects to.
func (c *Config) tpmSocket() string { return filepath.Join(c.Dir, "tpm.sock") }

// TPMDir is the machine's TPM state directory (Dir/TPMStateDir).
func (c *Config) TPMDir() string { return filepath.Join(c.Dir, TPMStateDir) }

// tpmArgs are qemu's arguments for a TPM 2.0 on the TIS interface,
// backed by the swtpm listening on tpmSocket.
func (c *Config) tpmArgs() []string {
	return []string{
		"-chardev", "socket,id=tpm,path=" + c.tpmSocket(),
		"-tpmdev", "emulator,id=tpm0,chardev=tpm",
		"-device", "tpm-tis,tpmdev=tpm0",
	}
}

// startTPM starts the machine's swtpm on its state directory and returns
// once it accepts connections on its control socket, with a func that
// stops it, called once qemu has exited. The state persists across boots.
func (c *Config) startTPM() (stop func(), err error) {
	if err := os.MkdirAll(c.TPMDir(), 0o700); err != nil {
		return nil, fmt.Errorf("vm %s: the TPM's state directory: %w", c.Name, err)
	}
	sock := c.tpmSocket()
	os.Remove(sock) // a stale socket would look ready
	cmd := exec.Command(c.SWTPM, "socket", "--tpm2",
		"--tpmstate", "dir="+c.TPMDir()+",mode=0600",
		"--ctrl", "type=unixio,path="+sock+",mode=0600",
		"--log", "file="+filepath.Join(c.TPMDir(), "swtpm.log")+",level=1")
	setProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("vm %s: starting the TPM emulator %s (apt-get install swtpm; or Config.NoTPM): %w", c.Name, c.SWTPM, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	ctx, cancel := context.WithTimeout(context.Background(), tpmStartTimeout)
	defer cancel()
	for {
		// Ready once it accepts a connection: the socket file exists a
		// moment before swtpm listens on it. swtpm takes the next
		// control connection (qemu's) after this one closes.
		conn, err := net.Dial("unix", sock)
		if err == nil {
			conn.Close()
			return func() { stopTPM(cmd, exited) }, nil
		}
		select {
		case err := <-exited:
			return nil, fmt.Errorf("vm %s: the TPM emulator exited at start (%v); see %s", c.Name, err, filepath.Join(c.TPMDir(), "swtpm.log"))
		case <-ctx.Done():
			cmd.Process.Kill()
			<-exited
			return nil, fmt.Errorf("vm %s: the TPM emulator's socket %s did not accept connections within %v: %w", c.Name, sock, tpmStartTimeout, err)
		case <-time.After(20 * time.Millisecond): // polling a socket: nothing to wait on
		}
	}
}

// stopTPM stops swtpm (SIGTERM: it saves its state and exits) and waits
// for it; exited delivers its Wait.
func stopTPM(cmd *exec.Cmd, exited <-chan error) {
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-exited
	}
}

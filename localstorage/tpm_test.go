package localstorage

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport/linuxudstpm"

	"github.com/polis-os/polis/internal/testutil"
)

// startSWTPM runs a swtpm TPM 2.0 emulator keeping its state in dir and
// returns a sealer on it and a func that stops the emulator (also done
// when the test ends). Without
// swtpm the test is skipped, except in CI (scripts/test installs it).
func startSWTPM(t *testing.T, dir string) (*TPMSealer, func()) {
	t.Helper()
	bin, err := exec.LookPath("swtpm")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("swtpm is missing; scripts/test installs it (apt-get install swtpm): %v", err)
		}
		t.Skip("swtpm is not installed (apt-get install swtpm); skipping the TPM sealer's tests")
	}
	sock := filepath.Join(dir, "tpm.sock")
	os.Remove(sock) // a stale socket of an earlier run would look ready
	cmd := exec.Command(bin, "socket", "--tpm2", "--tpmstate", "dir="+dir,
		"--server", "type=unixio,path="+sock, "--ctrl", "type=unixio,path="+filepath.Join(dir, "ctrl.sock"),
		"--flags", "not-need-init,startup-clear")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cmd.Process.Kill()
			cmd.Wait()
		}
	}
	t.Cleanup(stop)
	// Ready when it accepts a connection (the socket file exists before
	// swtpm listens on it): polled, as nothing tells.
	testutil.Eventually(t, 30*time.Second, "swtpm accepting on "+sock, func() error {
		c, err := net.Dial("unix", sock)
		if err != nil {
			return err
		}
		return c.Close()
	})
	tpm, err := linuxudstpm.Open(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tpm.Close() })
	return &TPMSealer{TPM: tpm}, stop
}

func TestTPMSealer(t *testing.T) {
	dir := t.TempDir()
	s, stop := startSWTPM(t, dir)
	secret := bytes.Repeat([]byte("the node key, far more than the 128 bytes a TPM seals; "), 10)
	sealed, err := s.Seal(secret)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, []byte("the node key")) {
		t.Fatal("the sealed data holds the plaintext")
	}
	got, err := s.Unseal(sealed)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, secret) {
		t.Fatal("Unseal did not return what was sealed")
	}

	// Every byte after the header matters: a flip is refused, never
	// returned as other plaintext.
	for _, i := range []int{len(tpmHeader) + 1, len(tpmHeader) + 40, len(sealed) / 2, len(sealed) - 1} {
		d := bytes.Clone(sealed)
		d[i] ^= 0x10
		if _, err := s.Unseal(d); err == nil {
			t.Errorf("byte %d flipped: unsealed", i)
		}
	}
	if _, err := s.Unseal(sealed[:len(sealed)-20]); err == nil {
		t.Error("truncated: unsealed")
	}
	if _, err := s.Unseal(append([]byte("POLIS-UNSEALED-INSECURE v1\n"), secret...)); !errors.Is(err, ErrNotSealedByThis) {
		t.Errorf("Unsealed's data: %v, want ErrNotSealedByThis", err)
	}
	if _, err := (Unsealed{}).Unseal(sealed); !errors.Is(err, ErrNotSealedByThis) {
		t.Errorf("Unsealed on TPM-sealed data: %v, want ErrNotSealedByThis", err)
	}

	// Another TPM (another machine's state) refuses it, and says so.
	other, _ := startSWTPM(t, t.TempDir())
	if _, err := other.Unseal(sealed); !errors.Is(err, ErrTPMRefused) {
		t.Fatalf("another TPM: %v, want ErrTPMRefused", err)
	}
	// The same TPM state, after the emulator restarts (a reboot of the
	// machine), unseals it.
	stop()
	again, _ := startSWTPM(t, dir)
	if got, err := again.Unseal(sealed); err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("the same TPM state after a restart: %v", err)
	}
}

// TestTPMSealerKeepsItsStorageRootKey: the storage root key is derived
// once and kept loaded across calls; a handle the TPM no longer knows (as
// after a reset of the TPM under the sealer) is derived again, and the
// call still succeeds.
func TestTPMSealerKeepsItsStorageRootKey(t *testing.T) {
	s, _ := startSWTPM(t, t.TempDir())
	if err := s.Prepare(); err != nil {
		t.Fatal(err)
	}
	first := s.srk
	if first == nil {
		t.Fatal("no storage root key kept after Prepare")
	}
	sealed, err := s.Seal([]byte("the local part"))
	if err != nil {
		t.Fatal(err)
	}
	if s.srk != first {
		t.Fatal("Seal derived the storage root key again")
	}
	if _, err := s.Unseal(sealed); err != nil {
		t.Fatal(err)
	}
	if s.srk != first {
		t.Fatal("Unseal derived the storage root key again")
	}
	if _, err := (tpm2.FlushContext{FlushHandle: first.Handle}).Execute(s.TPM); err != nil {
		t.Fatal(err)
	}
	got, err := s.Unseal(sealed)
	if err != nil || string(got) != "the local part" {
		t.Fatalf("Unseal after the kept key was flushed = %q, %v", got, err)
	}
	if s.srk == first {
		t.Fatal("the flushed storage root key is still kept")
	}
}

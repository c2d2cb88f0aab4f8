package clusternet

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"

	"golang.org/x/crypto/curve25519"

	"github.com/polis-os/polis/internal/atomicfile"
)

// Key is a WireGuard (Curve25519) key, private or public.
type Key [32]byte

// IsZero reports whether k is the zero key, which stands for "no key".
func (k Key) IsZero() bool { return k == Key{} }

// String is the key in WireGuard's usual base64 form.
func (k Key) String() string { return base64.StdEncoding.EncodeToString(k[:]) }

// PublicKey is the public half of the private key k.
func (k Key) PublicKey() Key {
	var pub Key
	curve25519.ScalarBaseMult((*[32]byte)(&pub), (*[32]byte)(&k))
	return pub
}

// ParseKey reads a key from its 32 raw bytes.
func ParseKey(b []byte) (Key, error) {
	var k Key
	if len(b) != len(k) {
		return Key{}, fmt.Errorf("a WireGuard key is %d bytes, not %d", len(k), len(b))
	}
	copy(k[:], b)
	return k, nil
}

// newPrivateKey makes a private key: 32 random bytes, clamped as
// Curve25519 requires.
func newPrivateKey() (Key, error) {
	var k Key
	if _, err := io.ReadFull(rand.Reader, k[:]); err != nil {
		return Key{}, fmt.Errorf("reading randomness for a WireGuard key: %w", err)
	}
	k[0] &= 248
	k[31] = (k[31] & 127) | 64
	return k, nil
}

// keyMu serialises LoadOrCreateKey.
var keyMu sync.Mutex

// LoadOrCreateKey returns the node's WireGuard private key kept at path,
// making one (and writing it with mode 0600, atomically) on first use. A
// file that exists but does not hold a key (not 32 bytes, or all zeros, as
// a zeroed block reads) is an error naming it, never overwritten: peers
// know this node by the key's public half.
//
// An existing key file whose mode is not 0600 (a restore or a copy that
// lost it) is set to 0600, not refused: the key is as good as it was, and
// whatever read it meanwhile has read it; refusing would only keep the
// node out of the pod network until someone fixed the mode by hand.
//
// Calls are serialised within the process: the agent's workers that need
// the key (publishing it, programming the device) may ask at the same
// time on a node's first boot, and must not each make a different one.
func LoadOrCreateKey(path string) (Key, error) {
	keyMu.Lock()
	defer keyMu.Unlock()
	f, err := os.Open(path)
	switch {
	case err == nil:
		defer f.Close()
		return loadKey(f)
	case !errors.Is(err, fs.ErrNotExist):
		return Key{}, fmt.Errorf("reading WireGuard key: %w", err)
	}
	k, err := newPrivateKey()
	if err != nil {
		return Key{}, err
	}
	err = atomicfile.Write(path, ".wgkey-*", 0o600, func(w io.Writer) error {
		_, err := w.Write(k[:])
		return err
	})
	if err != nil {
		return Key{}, fmt.Errorf("writing WireGuard key: %w", err)
	}
	return k, nil
}

// loadKey reads the key in f, an existing key file, and makes the file's
// mode 0600 if it is not.
func loadKey(f *os.File) (Key, error) {
	b, err := io.ReadAll(f)
	if err != nil {
		return Key{}, fmt.Errorf("reading WireGuard key: %w", err)
	}
	k, err := ParseKey(b)
	if err != nil {
		return Key{}, fmt.Errorf("WireGuard key %s: %w", f.Name(), err)
	}
	if k.IsZero() {
		return Key{}, fmt.Errorf("WireGuard key %s is all zeros: the file is corrupt", f.Name())
	}
	fi, err := f.Stat()
	if err != nil {
		return Key{}, fmt.Errorf("WireGuard key %s: %w", f.Name(), err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		if err := f.Chmod(0o600); err != nil {
			return Key{}, fmt.Errorf("WireGuard key %s has mode %o, and making it 0600 failed: %w", f.Name(), perm, err)
		}
	}
	return k, nil
}

package diskseal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/polis-os/polis/internal/devmapper"
)

// PartSize is the size of the local part and of the cluster part.
const PartSize = 32

// nonceSize and tagSize are AES-GCM's.
const (
	nonceSize = 12
	tagSize   = 16
)

// WrappedKeySize is the size of a wrapped data key: nonce, key, tag.
const WrappedKeySize = nonceSize + devmapper.CryptKeySize + tagSize

// ErrWrongKey is returned by Unwrap when the parts given do not open the
// wrapped key: a local part or a cluster part other than the disk's.
var ErrWrongKey = errors.New("diskseal: these parts do not open the data key")

// NewPart returns a random part.
func NewPart() []byte {
	b := make([]byte, PartSize)
	rand.Read(b)
	return b
}

// NewDataKey returns a random data key: the dm-crypt key of the disk's
// whole life, made once, wrapped in the header and never changed.
func NewDataKey() []byte {
	b := make([]byte, devmapper.CryptKeySize)
	rand.Read(b)
	return b
}

// Wrap encrypts dataKey into h under a key-encryption key derived from
// the local part and, for a disk bound to its cluster, the cluster part
// (nil for a disk that is not): it sets h.ClusterBound, a new h.Salt and
// h.WrappedKey. Binding a disk to its cluster, or unbinding it, is a Wrap
// and a header rewrite; the data is never encrypted anew.
func (h *Header) Wrap(dataKey, local, cluster []byte) error {
	if len(dataKey) != devmapper.CryptKeySize {
		return fmt.Errorf("diskseal: the data key is %d bytes, want %d", len(dataKey), devmapper.CryptKeySize)
	}
	var salt [SaltSize]byte
	rand.Read(salt[:])
	bound := cluster != nil
	aead, err := keyEncryption(local, cluster, salt, bound)
	if err != nil {
		return err
	}
	nonce := make([]byte, nonceSize, WrappedKeySize)
	rand.Read(nonce)
	h.ClusterBound, h.Salt = bound, salt
	h.WrappedKey = aead.Seal(nonce, nonce, dataKey, wrapAD(h.Sealing, bound))
	return nil
}

// Unwrap returns the data key of h, given the local part and, for a
// ClusterBound header, the cluster part (nil otherwise). Parts that do not
// open it give ErrWrongKey.
func (h *Header) Unwrap(local, cluster []byte) ([]byte, error) {
	switch {
	case h.ClusterBound && cluster == nil:
		return nil, errors.New("diskseal: the disk is bound to its cluster: unlocking it needs the cluster part")
	case !h.ClusterBound && cluster != nil:
		return nil, errors.New("diskseal: the disk is not bound to its cluster: unlocking it takes no cluster part")
	case len(h.WrappedKey) != WrappedKeySize:
		return nil, fmt.Errorf("diskseal: a wrapped key of %d bytes, want %d", len(h.WrappedKey), WrappedKeySize)
	}
	aead, err := keyEncryption(local, cluster, h.Salt, h.ClusterBound)
	if err != nil {
		return nil, err
	}
	key, err := aead.Open(nil, h.WrappedKey[:nonceSize], h.WrappedKey[nonceSize:], wrapAD(h.Sealing, h.ClusterBound))
	if err != nil {
		return nil, ErrWrongKey
	}
	return key, nil
}

// wrapAD is what the wrapped key is bound to besides its key: how the
// local part is sealed and whether the cluster part is needed, so that a
// header whose flags were changed does not open.
func wrapAD(s Sealing, bound bool) []byte {
	var b byte
	if bound {
		b = 1
	}
	return append([]byte("polis data disk v2 wrapped key"), byte(s), b)
}

// keyEncryption derives the key-encryption key, HKDF-SHA256 over the
// local part and the cluster part (each of fixed size, so no two pairs
// give the same input) with the salt, and returns it as AES-256-GCM.
func keyEncryption(local, cluster []byte, salt [SaltSize]byte, bound bool) (cipher.AEAD, error) {
	if len(local) != PartSize {
		return nil, fmt.Errorf("diskseal: the local part is %d bytes, want %d", len(local), PartSize)
	}
	if bound && len(cluster) != PartSize {
		return nil, fmt.Errorf("diskseal: the cluster part is %d bytes, want %d", len(cluster), PartSize)
	}
	ikm := make([]byte, 0, 2*PartSize)
	ikm = append(append(ikm, local...), cluster...)
	defer clear(ikm)
	info := "polis data disk v2 key-encryption key, local part only"
	if bound {
		info = "polis data disk v2 key-encryption key, local and cluster parts"
	}
	kek, err := hkdf.Key(sha256.New, ikm, salt[:], info, 32)
	if err != nil {
		return nil, fmt.Errorf("diskseal: deriving the key-encryption key: %w", err)
	}
	defer clear(kek)
	block, err := aes.NewCipher(kek)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

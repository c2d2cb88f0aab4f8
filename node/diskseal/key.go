package diskseal

import (
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"fmt"

	"github.com/polis-os/polis/internal/devmapper"
)

// PartSize is the size of the local part and of the cluster part.
const PartSize = 32

// keyInfo binds derived keys to their use and this format.
const keyInfo = "polis data disk v1 " + devmapper.CryptCipher

// NewPart returns a random part.
func NewPart() []byte {
	b := make([]byte, PartSize)
	rand.Read(b)
	return b
}

// NewSalt returns a random salt.
func NewSalt() [SaltSize]byte {
	var s [SaltSize]byte
	rand.Read(s[:])
	return s
}

// DataKey derives the data disk's dm-crypt key from the local part, the
// cluster part (nil for a disk that is not ClusterBound) and the header's
// salt. The parts are length-checked so that a truncated part is an
// error, not another key.
func DataKey(local, cluster []byte, salt [SaltSize]byte) ([]byte, error) {
	if len(local) != PartSize {
		return nil, fmt.Errorf("diskseal: the local part is %d bytes, want %d", len(local), PartSize)
	}
	if cluster != nil && len(cluster) != PartSize {
		return nil, fmt.Errorf("diskseal: the cluster part is %d bytes, want %d", len(cluster), PartSize)
	}
	// The input is local || cluster, each of fixed size, so no two pairs
	// of parts give the same input.
	ikm := make([]byte, 0, 2*PartSize)
	ikm = append(append(ikm, local...), cluster...)
	defer clear(ikm)
	key, err := hkdf.Key(sha256.New, ikm, salt[:], keyInfo, devmapper.CryptKeySize)
	if err != nil {
		return nil, fmt.Errorf("diskseal: deriving the data key: %w", err)
	}
	return key, nil
}

package diskseal

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
)

// HeaderSize is the size of the header block at the start of the disk.
const HeaderSize = 4096

// DataOffset is where the encrypted area starts on the disk, in bytes.
const DataOffset = 1 << 20

// Magic starts every header.
const Magic = "POLISDSK"

// Version is the header format this package writes and reads.
const Version = 1

// Sealing says how the local part is sealed.
type Sealing byte

const (
	// SealingSoftware: the local part is kept by a software sealer, which
	// protects nothing against a copy of the disk (development only).
	SealingSoftware Sealing = 1
	// SealingTPM: the local part is sealed by the machine's TPM 2.0.
	SealingTPM Sealing = 2
)

func (s Sealing) String() string {
	switch s {
	case SealingSoftware:
		return "software"
	case SealingTPM:
		return "tpm"
	}
	return fmt.Sprintf("unknown sealing %d", byte(s))
}

// State says whether the encrypted area holds a file system.
type State byte

const (
	// StateFormatting: the header was written, the file system may not
	// be complete; nothing was stored on it yet, so formatting again is
	// safe.
	StateFormatting State = 1
	// StateReady: the file system was made and synced. A ready disk is
	// never formatted.
	StateReady State = 2
)

func (s State) String() string {
	switch s {
	case StateFormatting:
		return "formatting"
	case StateReady:
		return "ready"
	}
	return fmt.Sprintf("unknown state %d", byte(s))
}

// SaltSize is the size of the key derivation's salt.
const SaltSize = 32

// Layout of the header block (all integers little-endian):
//
//	0    8  Magic
//	8    2  Version
//	10   1  Sealing
//	11   1  State
//	12   1  ClusterBound (0 or 1)
//	13   3  zero
//	16  32  Salt
//	48   4  length of the sealed local part, N
//	52   N  sealed local part
//	... zero
//	4064 32 SHA-256 of bytes 0-4063
const (
	offVersion  = 8
	offSealing  = 10
	offState    = 11
	offCluster  = 12
	offSalt     = 16
	offLocalLen = offSalt + SaltSize
	offLocal    = offLocalLen + 4
	offSum      = HeaderSize - sha256.Size
	// MaxSealedLocal is the largest sealed local part a header holds.
	MaxSealedLocal = offSum - offLocal
)

// Header is the decoded header of an encrypted data disk.
type Header struct {
	Sealing Sealing
	State   State
	// ClusterBound says the data key needs the cluster part. A disk made
	// without it (false) is unlocked by the local part alone.
	ClusterBound bool
	Salt         [SaltSize]byte
	// SealedLocal is the local part as the sealer (Sealing) sealed it.
	SealedLocal []byte
}

// ErrNoHeader is returned by Decode for a block that does not start with
// Magic: the disk is not (or no longer recognisably) ours.
var ErrNoHeader = errors.New("diskseal: no Polis header")

// DamagedError is returned by Decode for a block that starts with Magic
// but is not a valid header: damaged, or written by a newer version.
type DamagedError struct {
	// Reason says what is wrong.
	Reason string
}

func (e *DamagedError) Error() string {
	return "diskseal: the data disk's header is damaged: " + e.Reason
}

// Encode returns h as a HeaderSize block.
func (h *Header) Encode() ([]byte, error) {
	if err := h.check(); err != nil {
		return nil, err
	}
	b := make([]byte, HeaderSize)
	copy(b, Magic)
	binary.LittleEndian.PutUint16(b[offVersion:], Version)
	b[offSealing] = byte(h.Sealing)
	b[offState] = byte(h.State)
	if h.ClusterBound {
		b[offCluster] = 1
	}
	copy(b[offSalt:], h.Salt[:])
	binary.LittleEndian.PutUint32(b[offLocalLen:], uint32(len(h.SealedLocal)))
	copy(b[offLocal:], h.SealedLocal)
	sum := sha256.Sum256(b[:offSum])
	copy(b[offSum:], sum[:])
	return b, nil
}

// Decode reads a header from the first HeaderSize bytes of b.
func Decode(b []byte) (*Header, error) {
	if len(b) < len(Magic) || !bytes.Equal(b[:len(Magic)], []byte(Magic)) {
		return nil, ErrNoHeader
	}
	if len(b) < HeaderSize {
		return nil, &DamagedError{Reason: fmt.Sprintf("%d bytes, want %d", len(b), HeaderSize)}
	}
	b = b[:HeaderSize]
	if v := binary.LittleEndian.Uint16(b[offVersion:]); v != Version {
		// Checked before the sum: a newer format may sum differently.
		return nil, &DamagedError{Reason: fmt.Sprintf("version %d; this node reads version %d (a newer Polis wrote it, or the header is damaged)", v, Version)}
	}
	if sum := sha256.Sum256(b[:offSum]); !bytes.Equal(sum[:], b[offSum:]) {
		return nil, &DamagedError{Reason: "its checksum does not match"}
	}
	h := &Header{
		Sealing:      Sealing(b[offSealing]),
		State:        State(b[offState]),
		ClusterBound: b[offCluster] == 1,
	}
	if b[offCluster] > 1 {
		return nil, &DamagedError{Reason: fmt.Sprintf("cluster flag %d", b[offCluster])}
	}
	copy(h.Salt[:], b[offSalt:])
	n := binary.LittleEndian.Uint32(b[offLocalLen:])
	if n > MaxSealedLocal {
		return nil, &DamagedError{Reason: fmt.Sprintf("sealed local part of %d bytes, at most %d fit", n, MaxSealedLocal)}
	}
	h.SealedLocal = bytes.Clone(b[offLocal : offLocal+int(n)])
	if err := h.check(); err != nil {
		return nil, &DamagedError{Reason: err.Error()}
	}
	return h, nil
}

func (h *Header) check() error {
	switch {
	case h.Sealing != SealingSoftware && h.Sealing != SealingTPM:
		return fmt.Errorf("diskseal: %v", h.Sealing)
	case h.State != StateFormatting && h.State != StateReady:
		return fmt.Errorf("diskseal: %v", h.State)
	case len(h.SealedLocal) == 0:
		return errors.New("diskseal: no sealed local part")
	case len(h.SealedLocal) > MaxSealedLocal:
		return fmt.Errorf("diskseal: a sealed local part of %d bytes, at most %d fit", len(h.SealedLocal), MaxSealedLocal)
	}
	return nil
}

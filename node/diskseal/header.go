package diskseal

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
)

// HeaderSize is the size of one header slot.
const HeaderSize = 4096

// Slots is how many header slots the disk holds, one after the other from
// its start: a rewrite goes to the slot not in use, so that a crash in
// the middle of it leaves the other, whole.
const Slots = 2

// HeaderArea is the size of the header slots together: what Read reads.
const HeaderArea = Slots * HeaderSize

// DataOffset is where the encrypted area starts on the disk, in bytes.
const DataOffset = 1 << 20

// Magic starts every header.
const Magic = "POLISDSK"

// Version is the header format this package writes and reads. Version 1
// (a development build of 2026-11-25) derived the data key from the
// parts directly, so binding it to the cluster would have meant
// encrypting the disk anew; it is refused, not migrated (nothing released
// wrote it).
const Version = 2

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

// SaltSize is the size of the key-encryption key derivation's salt.
const SaltSize = 32

// Layout of a header slot (all integers little-endian):
//
//	0    8  Magic
//	8    2  Version
//	10   1  Sealing
//	11   1  State
//	12   1  ClusterBound (0 or 1)
//	13   3  zero
//	16   8  Generation
//	24  32  Salt
//	56  92  WrappedKey (nonce, the data key encrypted, tag)
//	148  4  length of the sealed local part, N
//	152  N  sealed local part
//	... zero
//	4064 32 SHA-256 of bytes 0-4063
const (
	offVersion    = 8
	offSealing    = 10
	offState      = 11
	offCluster    = 12
	offGeneration = 16
	offSalt       = 24
	offWrapped    = offSalt + SaltSize
	offLocalLen   = offWrapped + WrappedKeySize
	offLocal      = offLocalLen + 4
	offSum        = HeaderSize - sha256.Size
	// MaxSealedLocal is the largest sealed local part a header holds.
	MaxSealedLocal = offSum - offLocal
)

// Header is the decoded header of an encrypted data disk.
type Header struct {
	Sealing Sealing
	State   State
	// ClusterBound says the key-encryption key needs the cluster part.
	// A disk that is not (false) is unlocked by the local part alone.
	ClusterBound bool
	// Generation counts the header's rewrites: of two whole slots, the
	// one with the higher generation is the header.
	Generation uint64
	// Salt is the salt of the key-encryption key's derivation, new at
	// every Wrap.
	Salt [SaltSize]byte
	// WrappedKey is the data key encrypted under the key-encryption key
	// (Wrap, Unwrap).
	WrappedKey []byte
	// SealedLocal is the local part as the sealer (Sealing) sealed it.
	SealedLocal []byte
}

// ErrNoHeader is returned by Decode and Read for a disk that does not
// start with Magic: it is not (or no longer recognisably) ours.
var ErrNoHeader = errors.New("diskseal: no Polis header")

// DamagedError is returned by Decode and Read for a header that starts
// with Magic but is not valid: damaged, or written by another version.
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
	binary.LittleEndian.PutUint64(b[offGeneration:], h.Generation)
	copy(b[offSalt:], h.Salt[:])
	copy(b[offWrapped:], h.WrappedKey)
	binary.LittleEndian.PutUint32(b[offLocalLen:], uint32(len(h.SealedLocal)))
	copy(b[offLocal:], h.SealedLocal)
	sum := sha256.Sum256(b[:offSum])
	copy(b[offSum:], sum[:])
	return b, nil
}

// Decode reads a header from the first HeaderSize bytes of b: one slot.
func Decode(b []byte) (*Header, error) {
	if len(b) < len(Magic) || !bytes.Equal(b[:len(Magic)], []byte(Magic)) {
		return nil, ErrNoHeader
	}
	if len(b) < HeaderSize {
		return nil, &DamagedError{Reason: fmt.Sprintf("%d bytes, want %d", len(b), HeaderSize)}
	}
	b = b[:HeaderSize]
	switch v := binary.LittleEndian.Uint16(b[offVersion:]); {
	case v == 1:
		return nil, &DamagedError{Reason: "version 1, written by a development build of 2026-11-25 whose key cannot be bound to the cluster; this node reads version 2 only, and does not migrate it. Nothing on it can be reached by this build"}
	case v != Version:
		// Checked before the sum: another format may sum differently.
		return nil, &DamagedError{Reason: fmt.Sprintf("version %d; this node reads version %d (a newer Polis wrote it, or the header is damaged)", v, Version)}
	}
	if sum := sha256.Sum256(b[:offSum]); !bytes.Equal(sum[:], b[offSum:]) {
		return nil, &DamagedError{Reason: "its checksum does not match"}
	}
	h := &Header{
		Sealing:      Sealing(b[offSealing]),
		State:        State(b[offState]),
		ClusterBound: b[offCluster] == 1,
		Generation:   binary.LittleEndian.Uint64(b[offGeneration:]),
		WrappedKey:   bytes.Clone(b[offWrapped : offWrapped+WrappedKeySize]),
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
	if len(bytes.Trim(b[offCluster+1:offGeneration], "\x00")) > 0 || len(bytes.Trim(b[offLocal+int(n):offSum], "\x00")) > 0 {
		return nil, &DamagedError{Reason: "bytes that must be zero are not"}
	}
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
	case h.Generation == 0:
		return errors.New("diskseal: generation 0 (the first header is generation 1)")
	case len(h.WrappedKey) != WrappedKeySize:
		return fmt.Errorf("diskseal: a wrapped key of %d bytes, want %d (Wrap makes it)", len(h.WrappedKey), WrappedKeySize)
	case len(h.SealedLocal) == 0:
		return errors.New("diskseal: no sealed local part")
	case len(h.SealedLocal) > MaxSealedLocal:
		return fmt.Errorf("diskseal: a sealed local part of %d bytes, at most %d fit", len(h.SealedLocal), MaxSealedLocal)
	}
	return nil
}

// Found is the header Read found, and where.
type Found struct {
	// Header is the newest whole header.
	Header *Header
	// Slot is the slot it is in; the next rewrite goes to the other.
	Slot int
	// Stale says the other slot holds an older whole header: a crash
	// came after a rewrite and before the old slot was wiped. The writer
	// must wipe it (Offset of the other slot): after a binding, the old
	// header opens the disk without the cluster part.
	Stale bool
}

// Next is the slot the next rewrite goes to.
func (f Found) Next() int { return 1 - f.Slot }

// Offset is where slot starts on the disk.
func Offset(slot int) int64 { return int64(slot) * HeaderSize }

// Read finds the header in area, the first HeaderArea bytes of the disk:
// the whole slot of the highest generation. A slot that is damaged while
// the other is whole is a rewrite a crash cut short (the whole one is the
// header), or damage that the other slot outlived. ErrNoHeader means no
// slot starts with Magic; a *DamagedError that no slot is whole.
func Read(area []byte) (Found, error) {
	if len(area) < HeaderArea {
		return Found{}, fmt.Errorf("diskseal: reading the header: %d bytes, want %d", len(area), HeaderArea)
	}
	var (
		hs   [Slots]*Header
		errs [Slots]error
	)
	for i := range Slots {
		hs[i], errs[i] = Decode(area[Offset(i) : Offset(i)+HeaderSize])
	}
	switch {
	case hs[0] != nil && hs[1] != nil:
		if hs[0].Generation == hs[1].Generation {
			return Found{}, &DamagedError{Reason: fmt.Sprintf("both slots hold generation %d", hs[0].Generation)}
		}
		newer := 0
		if hs[1].Generation > hs[0].Generation {
			newer = 1
		}
		return Found{Header: hs[newer], Slot: newer, Stale: true}, nil
	case hs[0] != nil:
		return Found{Header: hs[0], Slot: 0}, nil
	case hs[1] != nil:
		return Found{Header: hs[1], Slot: 1}, nil
	case errors.Is(errs[0], ErrNoHeader) && errors.Is(errs[1], ErrNoHeader):
		return Found{}, ErrNoHeader
	}
	var damaged *DamagedError
	for _, err := range errs {
		if errors.As(err, &damaged) {
			return Found{}, damaged
		}
	}
	return Found{}, errors.Join(errs[:]...)
}

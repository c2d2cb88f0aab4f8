package localstorage

import (
	"bytes"
	"errors"
	"fmt"
)

// Sealer protects data at rest so that only this machine can read it back.
type Sealer interface {
	// Seal returns plaintext in sealed form.
	Seal(plaintext []byte) ([]byte, error)
	// Unseal returns the plaintext of sealed data, or an error if it was
	// not sealed by this sealer (another machine, another format).
	Unseal(sealed []byte) ([]byte, error)
}

// Unsealed is the Sealer for machines without a TPM, and for development
// (process mode): it does NOT protect anything. Anyone who can read the
// file, or a copy of the directory, can read the data. Machines with a
// TPM use TPMSealer. It marks what it writes with a header that says so, so that a later,
// real sealer refuses it rather than mistaking it for sealed data, and so
// that a person looking at the file is not misled.
type Unsealed struct{}

var _ Sealer = Unsealed{}

// unsealedHeader starts every file written by Unsealed.
var unsealedHeader = []byte("POLIS-UNSEALED-INSECURE v1\n")

// ErrNotSealedByThis is returned by Unseal for data another sealer wrote.
var ErrNotSealedByThis = errors.New("localstorage: data was not sealed by this sealer")

// Seal returns plaintext behind the "insecure" header.
func (Unsealed) Seal(plaintext []byte) ([]byte, error) {
	return append(bytes.Clone(unsealedHeader), plaintext...), nil
}

// Unseal strips the header, refusing data without it.
func (Unsealed) Unseal(sealed []byte) ([]byte, error) {
	rest, ok := bytes.CutPrefix(sealed, unsealedHeader)
	if !ok {
		return nil, fmt.Errorf("%w (no %q header)", ErrNotSealedByThis, bytes.TrimSpace(unsealedHeader))
	}
	return rest, nil
}

// WriteSealed seals data with s and writes it to f atomically.
func WriteSealed(f File, s Sealer, data []byte) error {
	sealed, err := s.Seal(data)
	if err != nil {
		return fmt.Errorf("sealing %s: %w", f.Path, err)
	}
	return f.Write(sealed)
}

// ReadSealed reads f and unseals it with s.
func ReadSealed(f File, s Sealer) ([]byte, error) {
	b, err := f.Read()
	if err != nil {
		return nil, err
	}
	data, err := s.Unseal(b)
	if err != nil {
		return nil, fmt.Errorf("unsealing %s: %w", f.Path, err)
	}
	return data, nil
}

package localstorage

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"
)

// TPMSealer seals data with the machine's TPM 2.0, so that only this
// TPM unseals it: a copy of the sealed file on another machine, or on
// this machine with another TPM, is useless.
//
// A TPM seals at most 128 bytes, so the data is encrypted (AES-256-GCM)
// with a random key, and the key is what the TPM seals: a keyed-hash
// object under the owner hierarchy's storage root key, which the TPM
// derives from its own seed. The object is fixedTPM and fixedParent: it
// cannot be loaded under any other parent. The storage root key is
// derived on the sealer's first call and kept loaded as a transient
// object (gone at the TPM's next reset, a reboot; nothing is written to
// its NV memory): a boot unseals at least twice (the data disk's local
// part, the sealed configuration), and deriving it is the costly part
// of an unseal (docs/benchmarks.md).
//
// There is no PCR policy: anything that runs on the machine and reaches
// its TPM can unseal. What the sealer defends against is a copy of the
// disks taken elsewhere; binding to measured boot is a later step
// (docs/threat-model.md).
type TPMSealer struct {
	// TPM is the transport to the TPM (go-tpm's linuxtpm on
	// /dev/tpmrm0, or an emulator's socket in tests).
	TPM transport.TPM

	mu sync.Mutex // one command sequence at a time on the transport
	// srk is the storage root key while it is loaded; with mu held.
	srk *tpm2.NamedHandle
}

var _ Sealer = (*TPMSealer)(nil)

// tpmHeader starts every file TPMSealer writes.
var tpmHeader = []byte("POLIS-TPM-SEALED v1\n")

// ErrTPMRefused is returned by TPMSealer.Unseal when the TPM refuses
// the sealed key: the data was sealed by another TPM (another machine,
// or this machine's TPM state was replaced or cleared).
var ErrTPMRefused = errors.New("localstorage: the TPM refuses the sealed key: the data was sealed by another TPM, or this TPM was cleared")

// Seal encrypts plaintext with a new key and seals the key with the TPM.
// Layout: tpmHeader, the sealed object's public and private parts (each
// behind a 2-byte length), the GCM nonce, the ciphertext.
func (s *TPMSealer) Seal(plaintext []byte) ([]byte, error) {
	key := make([]byte, 32)
	rand.Read(key)
	defer clear(key)
	pub, priv, err := s.sealKey(key)
	if err != nil {
		return nil, err
	}
	gcm, err := newGCM(key)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, gcm.NonceSize())
	rand.Read(nonce)
	out := bytes.Clone(tpmHeader)
	out = binary.BigEndian.AppendUint16(out, uint16(len(pub)))
	out = append(out, pub...)
	out = binary.BigEndian.AppendUint16(out, uint16(len(priv)))
	out = append(out, priv...)
	out = append(out, nonce...)
	// The header and sealed key are authenticated with the data.
	return gcm.Seal(out, nonce, plaintext, out[:len(out)-len(nonce)]), nil
}

// Unseal has the TPM unseal the key and decrypts the data with it.
func (s *TPMSealer) Unseal(sealed []byte) ([]byte, error) {
	rest, ok := bytes.CutPrefix(sealed, tpmHeader)
	if !ok {
		return nil, fmt.Errorf("%w (no %q header)", ErrNotSealedByThis, bytes.TrimSpace(tpmHeader))
	}
	pub, rest, err := cutLengthPrefixed(rest)
	if err != nil {
		return nil, err
	}
	priv, rest, err := cutLengthPrefixed(rest)
	if err != nil {
		return nil, err
	}
	key, err := s.unsealKey(pub, priv)
	if err != nil {
		return nil, err
	}
	defer clear(key)
	gcm, err := newGCM(key)
	if err != nil {
		return nil, err
	}
	if len(rest) < gcm.NonceSize()+gcm.Overhead() {
		return nil, errors.New("localstorage: TPM-sealed data: truncated")
	}
	nonce, ct := rest[:gcm.NonceSize()], rest[gcm.NonceSize():]
	aad := sealed[:len(sealed)-len(ct)-len(nonce)]
	plain, err := gcm.Open(nil, nonce, ct, aad)
	if err != nil {
		return nil, fmt.Errorf("localstorage: TPM-sealed data does not decrypt with the key the TPM unsealed (damaged): %w", err)
	}
	return plain, nil
}

// srkTemplate is the storage root key the sealed keys live under: the
// TCG's ECC P-256 template, quick to derive even in an emulator.
var srkTemplate = tpm2.ECCSRKTemplate

// Prepare derives the storage root key and keeps it loaded, so that the
// first Seal or Unseal does not pay for it. A machine calls it early in
// its boot, in the background: the first commands a TPM runs after a
// reset are its slowest (an emulator runs its self-tests then).
func (s *TPMSealer) Prepare() error {
	return s.withSRK(func(tpm2.NamedHandle) error { return nil })
}

// withSRK runs f with the storage root key, derived on first use and
// kept loaded. If f fails, the key is flushed and derived again, and f
// runs once more: a handle the TPM no longer knows (the TPM was reset
// under the sealer) must not fail every call after it.
func (s *TPMSealer) withSRK(f func(srk tpm2.NamedHandle) error) error {
	if s.TPM == nil {
		return errors.New("localstorage: TPMSealer has no TPM")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cached := s.srk != nil
	if err := s.loadSRK(); err != nil {
		return err
	}
	err := f(*s.srk)
	if err == nil || !cached {
		return err
	}
	tpm2.FlushContext{FlushHandle: s.srk.Handle}.Execute(s.TPM)
	s.srk = nil
	if err := s.loadSRK(); err != nil {
		return err
	}
	return f(*s.srk)
}

// loadSRK derives the storage root key unless it is loaded; with mu held.
func (s *TPMSealer) loadSRK() error {
	if s.srk != nil {
		return nil
	}
	rsp, err := tpm2.CreatePrimary{PrimaryHandle: tpm2.TPMRHOwner, InPublic: tpm2.New2B(srkTemplate)}.Execute(s.TPM)
	if err != nil {
		return fmt.Errorf("localstorage: the TPM's storage root key: %w", err)
	}
	s.srk = &tpm2.NamedHandle{Handle: rsp.ObjectHandle, Name: rsp.Name}
	return nil
}

// sealKey seals key as a keyed-hash object under the storage root key
// and returns the object's public and private parts.
func (s *TPMSealer) sealKey(key []byte) (pub, priv []byte, err error) {
	err = s.withSRK(func(srk tpm2.NamedHandle) error {
		rsp, err := tpm2.Create{
			ParentHandle: srk,
			InSensitive: tpm2.TPM2BSensitiveCreate{Sensitive: &tpm2.TPMSSensitiveCreate{
				Data: tpm2.NewTPMUSensitiveCreate(&tpm2.TPM2BSensitiveData{Buffer: key}),
			}},
			InPublic: tpm2.New2B(tpm2.TPMTPublic{
				Type:             tpm2.TPMAlgKeyedHash,
				NameAlg:          tpm2.TPMAlgSHA256,
				ObjectAttributes: tpm2.TPMAObject{FixedTPM: true, FixedParent: true, UserWithAuth: true, NoDA: true},
			}),
		}.Execute(s.TPM)
		if err != nil {
			return fmt.Errorf("localstorage: sealing with the TPM: %w", err)
		}
		pub, priv = rsp.OutPublic.Bytes(), rsp.OutPrivate.Buffer
		return nil
	})
	return pub, priv, err
}

// unsealKey loads the sealed object under the storage root key and
// unseals it.
func (s *TPMSealer) unsealKey(pub, priv []byte) ([]byte, error) {
	var key []byte
	err := s.withSRK(func(srk tpm2.NamedHandle) error {
		loaded, err := tpm2.Load{
			ParentHandle: srk,
			InPrivate:    tpm2.TPM2BPrivate{Buffer: priv},
			InPublic:     tpm2.BytesAs2B[tpm2.TPMTPublic](pub),
		}.Execute(s.TPM)
		if err != nil {
			// The private part is encrypted and checked with a key from
			// the parent, whose seed is this TPM's: another TPM fails
			// its integrity check here.
			return fmt.Errorf("%w: %v", ErrTPMRefused, err)
		}
		defer tpm2.FlushContext{FlushHandle: loaded.ObjectHandle}.Execute(s.TPM)
		rsp, err := tpm2.Unseal{ItemHandle: tpm2.NamedHandle{Handle: loaded.ObjectHandle, Name: loaded.Name}}.Execute(s.TPM)
		if err != nil {
			return fmt.Errorf("localstorage: unsealing with the TPM: %w", err)
		}
		key = rsp.OutData.Buffer
		return nil
	})
	return key, err
}

func newGCM(key []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("localstorage: %w", err)
	}
	return cipher.NewGCM(b)
}

func cutLengthPrefixed(b []byte) (field, rest []byte, err error) {
	if len(b) < 2 {
		return nil, nil, errors.New("localstorage: TPM-sealed data: truncated")
	}
	n := int(binary.BigEndian.Uint16(b))
	if len(b) < 2+n {
		return nil, nil, errors.New("localstorage: TPM-sealed data: truncated")
	}
	return b[2 : 2+n], b[2+n:], nil
}

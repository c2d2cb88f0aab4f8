package backup

import (
	"bufio"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"filippo.io/age"
	"filippo.io/age/agessh"
	"golang.org/x/crypto/ssh"
)

// formatLine opens every backup's plaintext.
const formatLine = "polis-backup v1\n"

// maxInfoLine bounds the Info line, so that a damaged plaintext cannot make
// Decrypt read without end looking for it.
const maxInfoLine = 64 << 10

// ErrWrongKey is returned by Decrypt for a backup that was not encrypted to
// the key it was given.
var ErrWrongKey = errors.New("the backup was not encrypted to this owner key")

// ErrDamaged is wrapped by the errors of Decrypt and Write for a backup or
// snapshot whose contents fail a check: damaged, cut short, or not a
// backup at all.
var ErrDamaged = errors.New("the backup is damaged or incomplete")

// Info describes a backup: what the curator said of the snapshot it took.
type Info struct {
	// TakenAt is when the curator started taking the snapshot.
	TakenAt time.Time `json:"taken_at"`
	// NodeID is the node whose consensus member the snapshot is from.
	NodeID string `json:"node_id"`
	// Revision is etcd's revision when the snapshot was taken.
	Revision int64 `json:"revision"`
	// EtcdVersion is the version of the etcd that took it.
	EtcdVersion string `json:"etcd_version"`
}

// Recipient returns the age recipient of an owner key: the ssh-ed25519
// recipient of its public key, the same one `age -R` makes of the key in
// OpenSSH form, so that the owner can also open a backup with age itself.
func Recipient(owner ed25519.PublicKey) (age.Recipient, error) {
	pk, err := ssh.NewPublicKey(owner)
	if err != nil {
		return nil, fmt.Errorf("owner public key: %w", err)
	}
	r, err := agessh.NewEd25519Recipient(pk)
	if err != nil {
		return nil, fmt.Errorf("owner public key: %w", err)
	}
	return r, nil
}

// Write writes a backup of snapshot (etcd's snapshot format, read to its
// end) to w, encrypted to owner. It checks the snapshot's SHA-256 as it
// goes and fails, wrapping ErrDamaged, if the snapshot is cut short or
// does not match its hash: w then holds no valid backup, and the caller
// must throw it away.
func Write(w io.Writer, owner ed25519.PublicKey, info Info, snapshot io.Reader) error {
	r, err := Recipient(owner)
	if err != nil {
		return err
	}
	enc, err := age.Encrypt(w, r)
	if err != nil {
		return fmt.Errorf("encrypting the backup: %w", err)
	}
	head, err := json.Marshal(info)
	if err != nil {
		return err
	}
	if _, err := io.WriteString(enc, formatLine+string(head)+"\n"); err != nil {
		return fmt.Errorf("writing the backup: %w", err)
	}
	v := newVerifier(enc)
	if _, err := io.Copy(v, snapshot); err != nil {
		return fmt.Errorf("writing the backup: %w", err)
	}
	if err := v.check(); err != nil {
		return fmt.Errorf("the snapshot the curator sent: %w", err)
	}
	// The trailer the verifier held back goes in too: the plaintext keeps
	// etcd's format whole.
	if _, err := enc.Write(v.tail); err != nil {
		return fmt.Errorf("writing the backup: %w", err)
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("writing the backup: %w", err)
	}
	return nil
}

// Decrypt opens a backup with the owner key, writes the snapshot's
// database (without etcd's trailing hash, which it checks) to db, and
// returns the backup's Info. A backup for another key fails with
// ErrWrongKey; one that is damaged, cut short or not a backup fails
// wrapping ErrDamaged. On failure db may hold part of the database: the
// caller discards it.
func Decrypt(r io.Reader, key ed25519.PrivateKey, db io.Writer) (*Info, error) {
	id, err := agessh.NewEd25519Identity(key)
	if err != nil {
		return nil, fmt.Errorf("owner key: %w", err)
	}
	dec, err := age.Decrypt(r, id)
	if err != nil {
		var nm *age.NoIdentityMatchError
		if errors.As(err, &nm) {
			return nil, ErrWrongKey
		}
		return nil, fmt.Errorf("%w: not a readable age file: %v", ErrDamaged, err)
	}
	br := bufio.NewReader(dec)
	line, err := readLine(br, len(formatLine))
	if err != nil {
		// age fails on the first read of a file cut short or altered.
		return nil, fmt.Errorf("%w: %v", ErrDamaged, err)
	}
	if line != formatLine {
		return nil, fmt.Errorf("%w: it does not start with %q (is it a Polis backup?)", ErrDamaged, strings.TrimSpace(formatLine))
	}
	head, err := readLine(br, maxInfoLine)
	if err != nil {
		return nil, fmt.Errorf("%w: reading its description: %v", ErrDamaged, err)
	}
	var info Info
	if err := json.Unmarshal([]byte(head), &info); err != nil {
		return nil, fmt.Errorf("%w: its description: %v", ErrDamaged, err)
	}
	v := newVerifier(db)
	if _, err := io.Copy(v, br); err != nil {
		// age fails here for a file that was cut short or altered.
		return nil, fmt.Errorf("%w: %v", ErrDamaged, err)
	}
	if err := v.check(); err != nil {
		return nil, err
	}
	return &info, nil
}

// readLine reads one line of at most max bytes, newline included.
func readLine(br *bufio.Reader, max int) (string, error) {
	var b []byte
	for len(b) < max {
		c, err := br.ReadByte()
		if err != nil {
			return "", err
		}
		b = append(b, c)
		if c == '\n' {
			return string(b), nil
		}
	}
	return "", fmt.Errorf("a line longer than %d bytes", max)
}

// ReadSnapshot writes the database of a snapshot in etcd's format (as a
// consensus member keeps them on its disk) to db, checking its trailing
// SHA-256 as Decrypt does: a snapshot cut short or altered fails wrapping
// ErrDamaged, and db must then be discarded.
func ReadSnapshot(r io.Reader, db io.Writer) error {
	v := newVerifier(db)
	if _, err := io.Copy(v, r); err != nil {
		return fmt.Errorf("reading the snapshot: %w", err)
	}
	return v.check()
}

package backup

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"hash"
	"io"
)

// verifier passes etcd's snapshot format through to w, except for the
// trailing SHA-256 it holds back and checks: w receives exactly the
// database. A snapshot is etcd's bbolt database followed by the SHA-256
// of the database.
type verifier struct {
	w    io.Writer
	h    hash.Hash
	tail []byte // the last sha256.Size bytes seen, not yet passed on
	n    int64
}

func newVerifier(w io.Writer) *verifier {
	return &verifier{w: w, h: sha256.New()}
}

func (v *verifier) Write(p []byte) (int, error) {
	n := len(p)
	v.n += int64(n)
	buf := append(v.tail, p...)
	if len(buf) <= sha256.Size {
		v.tail = buf
		return n, nil
	}
	out := buf[:len(buf)-sha256.Size]
	v.h.Write(out)
	if _, err := v.w.Write(out); err != nil {
		return 0, err
	}
	v.tail = append([]byte(nil), buf[len(buf)-sha256.Size:]...)
	return n, nil
}

// check says whether what was written ended with the SHA-256 of what came
// before it.
func (v *verifier) check() error {
	if len(v.tail) < sha256.Size || v.n == sha256.Size {
		return fmt.Errorf("%w: the snapshot is empty or cut short (%d bytes)", ErrDamaged, v.n)
	}
	if subtle.ConstantTimeCompare(v.h.Sum(nil), v.tail) != 1 {
		return fmt.Errorf("%w: the snapshot's SHA-256 does not match its database (%d bytes): it was cut short or altered", ErrDamaged, v.n)
	}
	return nil
}

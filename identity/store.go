package identity

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Where the CA lives in etcd, relative to the client's namespace (the
// curator's). Both keys are written together in one transaction and never
// changed afterwards.
const (
	// CAPrefix is the prefix of the CA's keys.
	CAPrefix = "pki/ca/"
	// caCertKey holds the DER of the CA certificate.
	caCertKey = CAPrefix + "certificate"
	// caKeyKey holds the PKCS#8 DER of the CA private key.
	caKeyKey = CAPrefix + "key"
)

// Errors of the CA store.
var (
	// ErrNoCA means that etcd holds no CA yet.
	ErrNoCA = errors.New("no cluster CA in etcd")
	// ErrCAExists means that CreateCA found a CA already in etcd.
	ErrCAExists = errors.New("a cluster CA already exists in etcd")
	// ErrCorruptCA means that what etcd holds under CAPrefix is not a valid
	// CA: half of it missing, undecodable, or a key that does not match the
	// certificate. Nothing in this package overwrites such an entry; it
	// needs an operator.
	ErrCorruptCA = errors.New("cluster CA in etcd is corrupt")
)

// CreateCA creates a new CA (valid from now) and stores it in etcd through
// kv, usually the curator's namespaced *clientv3.Client, if and only if no
// CA is stored yet: the check and the write are one transaction, so of
// several concurrent creators exactly one succeeds and the others get
// ErrCAExists (wrapping ErrCorruptCA too if the stored entry is corrupt).
// Use EnsureCA to get the stored CA either way.
func CreateCA(ctx context.Context, kv clientv3.KV, now time.Time) (*CA, error) {
	ca, created, err := storeCA(ctx, kv, now)
	switch {
	case created:
		return ca, nil
	case errors.Is(err, ErrCorruptCA):
		return nil, fmt.Errorf("%w: %w", ErrCAExists, err)
	case err != nil:
		return nil, err
	}
	return nil, ErrCAExists
}

// EnsureCA returns the CA stored in etcd through kv, creating and storing a
// new one (valid from now) if there is none. created says which happened.
// Concurrent callers (two curators at bootstrap) all get the same CA: the
// creation is a transaction that writes only if nothing is stored, and
// otherwise reads what is. A corrupt entry is an error wrapping
// ErrCorruptCA, never replaced.
func EnsureCA(ctx context.Context, kv clientv3.KV, now time.Time) (ca *CA, created bool, err error) {
	return storeCA(ctx, kv, now)
}

// storeCA is CreateCA and EnsureCA: it writes a new CA if neither key
// exists, or else loads what is there (when created is false, ca is the
// stored CA, or err says why there is none: etcd failed, or the entry is
// corrupt).
func storeCA(ctx context.Context, kv clientv3.KV, now time.Time) (ca *CA, created bool, err error) {
	ca, err = NewCA(now)
	if err != nil {
		return nil, false, err
	}
	keyDER, err := MarshalPrivateKey(ca.key)
	if err != nil {
		return nil, false, fmt.Errorf("creating CA: %w", err)
	}
	resp, err := kv.Txn(ctx).
		If(
			clientv3.Compare(clientv3.CreateRevision(caCertKey), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(caKeyKey), "=", 0),
		).
		Then(
			clientv3.OpPut(caCertKey, string(ca.cert.Raw)),
			clientv3.OpPut(caKeyKey, string(keyDER)),
		).
		Else(
			clientv3.OpGet(caCertKey),
			clientv3.OpGet(caKeyKey),
		).
		Commit()
	if err != nil {
		return nil, false, fmt.Errorf("storing CA in etcd: %w", err)
	}
	if resp.Succeeded {
		return ca, true, nil
	}
	stored, err := decodeCA(resp.Responses[0].GetResponseRange().GetKvs(), resp.Responses[1].GetResponseRange().GetKvs())
	if err != nil {
		return nil, false, err
	}
	return stored, false, nil
}

// LoadCA reads the CA stored in etcd through kv: ErrNoCA if there is none,
// an error wrapping ErrCorruptCA if the entry is not a valid CA.
func LoadCA(ctx context.Context, kv clientv3.KV) (*CA, error) {
	resp, err := kv.Txn(ctx).Then(clientv3.OpGet(caCertKey), clientv3.OpGet(caKeyKey)).Commit()
	if err != nil {
		return nil, fmt.Errorf("reading CA from etcd: %w", err)
	}
	return decodeCA(resp.Responses[0].GetResponseRange().GetKvs(), resp.Responses[1].GetResponseRange().GetKvs())
}

// decodeCA turns the results of reading both CA keys (at one revision) into
// a CA. (T is etcd's key-value type, left to inference.)
func decodeCA[T interface{ GetValue() []byte }](certKVs, keyKVs []T) (*CA, error) {
	switch {
	case len(certKVs) == 0 && len(keyKVs) == 0:
		return nil, ErrNoCA
	case len(certKVs) == 0:
		return nil, fmt.Errorf("%w: %s is present but %s is missing", ErrCorruptCA, caKeyKey, caCertKey)
	case len(keyKVs) == 0:
		return nil, fmt.Errorf("%w: %s is present but %s is missing", ErrCorruptCA, caCertKey, caKeyKey)
	}
	cert, err := x509.ParseCertificate(certKVs[0].GetValue())
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrCorruptCA, caCertKey, err)
	}
	key, err := ParsePrivateKey(keyKVs[0].GetValue())
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrCorruptCA, caKeyKey, err)
	}
	ca, err := newCAFrom(cert, key)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorruptCA, err)
	}
	return ca, nil
}

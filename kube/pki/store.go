package pki

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// StoreKey is the etcd key, relative to the key space the caller's client
// is confined to, that holds a cluster's Kubernetes PKI. The curator keeps
// it in its own namespace, which the apiserver's confined endpoint cannot
// reach: the CA key must never be readable through Kubernetes.
const StoreKey = "kubernetes/pki"

// Errors of the store.
var (
	// ErrNoCluster is Load's error when no PKI was created yet.
	ErrNoCluster = errors.New("pki: no Kubernetes PKI stored yet")
	// ErrCorruptCluster wraps what is wrong with a stored PKI that cannot be
	// used; it is never silently replaced, since every controller node and
	// every issued certificate depends on it.
	ErrCorruptCluster = errors.New("pki: stored Kubernetes PKI is corrupt")
)

// storedCluster is the stored form: JSON, so that an operator reading etcd
// sees PEM, with a version for later changes of form.
type storedCluster struct {
	Version           int    `json:"version"`
	CACert            string `json:"caCert"`
	CAKey             string `json:"caKey"`
	ServiceAccountKey string `json:"serviceAccountKey"`
}

const storeVersion = 1

// Ensure returns the cluster's Kubernetes PKI stored at StoreKey through
// kv, creating it first (NewCluster) if there is none. Creation is one
// etcd transaction that only succeeds if the key does not exist, so callers
// racing on several nodes all end up with the same PKI. created says
// whether this call made it.
func Ensure(ctx context.Context, kv clientv3.KV, clusterName string, now time.Time) (c *Cluster, created bool, err error) {
	fresh, err := NewCluster(clusterName, now)
	if err != nil {
		return nil, false, err
	}
	value, err := json.Marshal(storedCluster{
		Version:           storeVersion,
		CACert:            string(fresh.CACert),
		CAKey:             string(fresh.CAKey),
		ServiceAccountKey: string(fresh.ServiceAccountKey),
	})
	if err != nil {
		return nil, false, fmt.Errorf("pki: encoding: %w", err)
	}
	resp, err := kv.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(StoreKey), "=", 0)).
		Then(clientv3.OpPut(StoreKey, string(value))).
		Else(clientv3.OpGet(StoreKey)).
		Commit()
	if err != nil {
		return nil, false, fmt.Errorf("pki: storing the Kubernetes PKI in etcd: %w", err)
	}
	if resp.Succeeded {
		return fresh, true, nil
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		// Deleted between the comparison and the read: cannot happen in one
		// transaction, but an empty answer must not pass as a PKI.
		return nil, false, fmt.Errorf("%w: key %s vanished", ErrCorruptCluster, StoreKey)
	}
	stored, err := decodeCluster(kvs[0].Value)
	return stored, false, err
}

// Load reads the cluster's Kubernetes PKI through kv: ErrNoCluster if none
// was created, an error wrapping ErrCorruptCluster if it cannot be used.
func Load(ctx context.Context, kv clientv3.KV) (*Cluster, error) {
	resp, err := kv.Get(ctx, StoreKey)
	if err != nil {
		return nil, fmt.Errorf("pki: reading the Kubernetes PKI from etcd: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, ErrNoCluster
	}
	return decodeCluster(resp.Kvs[0].Value)
}

// decodeCluster parses and checks a stored PKI: the CA certificate and both
// keys must parse, and the CA key must be the certificate's.
func decodeCluster(value []byte) (*Cluster, error) {
	var s storedCluster
	if err := json.Unmarshal(value, &s); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorruptCluster, err)
	}
	if s.Version != storeVersion {
		return nil, fmt.Errorf("%w: version %d, want %d", ErrCorruptCluster, s.Version, storeVersion)
	}
	c := &Cluster{CACert: []byte(s.CACert), CAKey: []byte(s.CAKey), ServiceAccountKey: []byte(s.ServiceAccountKey)}
	if _, _, err := c.ca(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorruptCluster, err)
	}
	if _, err := parseKey(c.ServiceAccountKey); err != nil {
		return nil, fmt.Errorf("%w: service-account key: %v", ErrCorruptCluster, err)
	}
	return c, nil
}

// Package pki makes the public-key infrastructure of a Kubernetes control
// plane: a cluster's Kubernetes CA and service-account key, the serving
// certificate of each controller node's apiserver, client certificates for
// the components and for people, and the files the components read
// (certificates, keys, kubeconfigs).
//
// # Model
//
// Kubernetes has its own CA, separate from the Polis cluster CA (identity):
// the apiserver trusts every certificate that CA signed as a user named by
// its CommonName and in the groups named by its Organizations, so it must
// not trust node or operator certificates of Polis that were issued for
// other purposes. A Cluster holds what is created once per cluster and
// shared by every controller node: the CA and the service-account signing
// key (every apiserver must accept every token, and every apiserver and
// controller-manager must sign with the same key). Everything else is issued
// from it: a serving certificate per controller node (its addresses and the
// in-cluster names of the kubernetes service), client certificates (the
// components', the apiserver's towards kubelets), and, for keys whose
// private half stays with its holder (SignClient, SignServing), the
// owner's client certificate and each kubelet's client
// (system:node:<node>, system:nodes) and serving certificates.
//
// Everything but the store is a pure function of its inputs plus fresh
// randomness (keys, serial numbers). The store (Ensure, Load) keeps the
// Cluster in etcd under StoreKey, created once in one transaction however
// many nodes race to create it; which key space (the curator's namespace)
// and writing the files to the node's storage are the callers' business. Keys are ECDSA P-256, which every
// Kubernetes component and client accepts for TLS and service-account
// tokens (ES256). Everything is exchanged as PEM.
package pki

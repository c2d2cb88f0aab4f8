// Command polis-coredns is the cluster DNS server that every Polis worker
// node runs as a node service: CoreDNS, built with the few plugins a node's
// resolver needs and nothing else.
//
// Upstream's coredns binary links every plugin it ships (cloud DNS
// providers, etcd, DNSSEC signing, DNS over QUIC and HTTPS listeners, ...),
// and its Corefile may name any of them. This main links only:
//
//	bind        listen on the node's address alone
//	ready       /ready once the kubernetes plugin has synced (loopback)
//	health      /health while the process lives (loopback)
//	prometheus  /metrics: queries, cache, the process' memory (loopback)
//	errors      log failed queries
//	cache       answer repeated questions without the API
//	kubernetes  Services and Pods of cluster.local from the apiserver
//
// and registers exactly those directives, so a Corefile naming another
// plugin is refused at start instead of being half served. Names outside
// the cluster's zones are not forwarded: Polis nodes have no upstream
// resolver to give it (kube/dns writes the Corefile).
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
)

// directives are the plugins above in upstream's execution order (its
// generated dnsserver.Directives): a query passes through them top down.
var directives = []string{"bind", "ready", "health", "prometheus", "errors", "cache", "kubernetes"}

func main() {
	dnsserver.Directives = directives
	coremain.Run()
}

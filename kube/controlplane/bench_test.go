package controlplane

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/kube/etcdproxy"
	"github.com/polis-os/polis/kube/kubetest"
	"github.com/polis-os/polis/kube/pki"
	"github.com/polis-os/polis/supervisor"
)

// BenchmarkStartToReady measures one control plane from the runner's start
// to the apiserver's /readyz answering ok (etcd and the proxy already
// running, the PKI made), and reports each component's resident memory
// (VmRSS) at that moment, in MB.
//
//	go test -run '^$' -bench StartToReady -benchtime 3x ./kube/controlplane/
func BenchmarkStartToReady(b *testing.B) {
	bundlePath := kubetest.Bundle(b)
	rss := map[string]float64{}
	for b.Loop() {
		b.StopTimer()
		addr := subnets.Addrs(1)[0]
		raw := kubetest.StartEtcd(b, testutil.FreePort(b, addr))
		port := testutil.FreePort(b, addr).Port()
		cluster, err := pki.NewCluster("bench", time.Now())
		if err != nil {
			b.Fatal(err)
		}
		server := "https://" + netip.AddrPortFrom(addr, port).String()
		files, err := cluster.ControlPlaneFiles([]netip.Addr{addr}, netip.MustParseAddr("10.96.0.1"), server, time.Now())
		if err != nil {
			b.Fatal(err)
		}
		dir := b.TempDir()
		proxy, err := etcdproxy.New(etcdproxy.Config{Client: raw, Prefix: prefix, Socket: filepath.Join(dir, "etcd.sock")})
		if err != nil {
			b.Fatal(err)
		}
		runner, err := New(Config{Bundle: bundlePath, Dir: filepath.Join(dir, "kube"), Files: files, Address: addr, Port: int(port), EtcdEndpoint: proxy.Endpoint()})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		proxySup := supervisor.New(ctx, proxy.Run, supervisor.WithLogger(zaptest.NewLogger(b, zaptest.Level(zap.ErrorLevel))))
		b.StartTimer()
		sup := supervisor.New(ctx, runner.Run, supervisor.WithLogger(zaptest.NewLogger(b, zaptest.Level(zap.ErrorLevel))))
		st := waitStatus(b, runner, "ready", func(s *Status) bool { return s.Ready })
		b.StopTimer()
		for _, c := range st.Components {
			rss[c.Name] += vmRSS(c.PID)
		}
		cancel()
		sup.Wait()
		proxySup.Wait()
		b.StartTimer()
	}
	for name, total := range rss {
		b.ReportMetric(total/float64(b.N), name+"-MB")
	}
}

// vmRSS is the resident memory of process pid in MB, 0 if unknown.
func vmRSS(pid int) float64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(data)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

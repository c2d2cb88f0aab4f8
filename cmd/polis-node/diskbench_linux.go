package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"go.uber.org/zap"

	"github.com/polis-os/polis/localstorage"
	"github.com/polis-os/polis/node/pid1"
)

// The data disk benchmark (pid1.DiskBenchParameter): what the machine
// does instead of running the agent when launch/vm's BenchmarkDataDisk
// boots it, so that the encrypted data disk and a plain one are measured
// with the same code, under the same TCG. It prints one line
// (pid1.DiskBenchMessage) and powers off.
//
//   - write: diskBenchFileSize in 1 MiB writes, then fsync;
//   - read: the same file after dropping the page cache;
//   - fdatasync: diskBenchSyncs appends of 4 KiB each followed by
//     fdatasync, as a write-ahead log does;
//   - etcd: a single-member etcd on the data disk, diskBenchPuts
//     sequential Puts of 256 bytes, each acknowledged only once etcd has
//     synced its WAL: etcd's write latency on this disk;
//   - the TPM: diskBenchUnseals unseals of a 32-byte part, as the data
//     disk's local part and the sealed configuration are at every boot.
const (
	diskBenchFileSize = 64 << 20
	diskBenchSyncs    = 200
	diskBenchPuts     = 300
	diskBenchUnseals  = 5
)

func runDiskBench(console func(string, ...any), m *pid1.Machine) error {
	dir := filepath.Join(m.StorageRoot, "data", "diskbench")
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if wait := time.Until(m.DiskBenchStart); wait > 0 {
		time.Sleep(wait) // machines booted together measure together
	}
	file := filepath.Join(dir, "seq")
	write, err := benchWrite(file)
	if err != nil {
		return fmt.Errorf("diskbench: writing: %w", err)
	}
	read, err := benchRead(file)
	if err != nil {
		return fmt.Errorf("diskbench: reading: %w", err)
	}
	syncs, err := benchSyncs(filepath.Join(dir, "wal"))
	if err != nil {
		return fmt.Errorf("diskbench: fdatasync: %w", err)
	}
	puts, err := benchEtcd(filepath.Join(dir, "etcd"))
	if err != nil {
		return fmt.Errorf("diskbench: etcd: %w", err)
	}
	unseals, err := benchUnseal(m.Sealer())
	if err != nil {
		return fmt.Errorf("diskbench: the TPM: %w", err)
	}
	mib := float64(diskBenchFileSize) / (1 << 20)
	console("%s mode=%s sealing=%s write_MiBps=%.1f read_MiBps=%.1f fdatasync_p50_ms=%.2f fdatasync_p99_ms=%.2f etcd_put_p50_ms=%.2f etcd_put_p99_ms=%.2f etcd_put_mean_ms=%.2f tpm_unseal_p50_ms=%.2f",
		pid1.DiskBenchMessage, m.DiskBench, m.DataSealing, mib/write.Seconds(), mib/read.Seconds(),
		ms(quantile(syncs, 0.5)), ms(quantile(syncs, 0.99)), ms(quantile(puts, 0.5)), ms(quantile(puts, 0.99)), ms(mean(puts)), ms(quantile(unseals, 0.5)))
	return os.RemoveAll(dir)
}

func benchWrite(p string) (time.Duration, error) {
	buf := make([]byte, 1<<20)
	rand.Read(buf) // not zeros: nothing below may compress or skip them
	f, err := os.Create(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	start := time.Now()
	for range diskBenchFileSize / len(buf) {
		if _, err := f.Write(buf); err != nil {
			return 0, err
		}
	}
	if err := f.Sync(); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

func benchRead(p string) (time.Duration, error) {
	// The page cache holds what was just written: drop it, so that the
	// read comes from the disk (through the cipher, when it is
	// encrypted).
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0); err != nil {
		return 0, err
	}
	f, err := os.Open(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	start := time.Now()
	for {
		n, err := f.Read(buf)
		if n == 0 || err != nil {
			break
		}
	}
	return time.Since(start), nil
}

func benchSyncs(p string) ([]time.Duration, error) {
	f, err := os.Create(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	block := make([]byte, 4096)
	rand.Read(block)
	var ds []time.Duration
	for range diskBenchSyncs {
		start := time.Now()
		if _, err := f.Write(block); err != nil {
			return nil, err
		}
		if err := f.Sync(); err != nil { // fsync; on Linux as costly as fdatasync for an append
			return nil, err
		}
		ds = append(ds, time.Since(start))
	}
	return ds, nil
}

func benchEtcd(dir string) ([]time.Duration, error) {
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.Logger = "zap"
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	local := func(port string) []url.URL { return []url.URL{{Scheme: "http", Host: "127.0.0.1:" + port}} }
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = local("17834"), local("17834")
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = local("17833"), local("17833")
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(2 * time.Minute):
		return nil, fmt.Errorf("etcd was not ready within 2 minutes")
	}
	cli := v3client.New(e.Server)
	defer cli.Close()
	value := make([]byte, 256)
	rand.Read(value)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var ds []time.Duration
	for i := range diskBenchPuts + 10 {
		start := time.Now()
		if _, err := cli.Put(ctx, fmt.Sprintf("bench/%d", i%50), string(value)); err != nil {
			return nil, err
		}
		if i >= 10 { // the first ones warm etcd up
			ds = append(ds, time.Since(start))
		}
	}
	return ds, nil
}

func benchUnseal(s localstorage.Sealer) ([]time.Duration, error) {
	if s == nil {
		return []time.Duration{0}, nil // no TPM
	}
	sealed, err := s.Seal(make([]byte, 32))
	if err != nil {
		return nil, err
	}
	var ds []time.Duration
	for range diskBenchUnseals {
		start := time.Now()
		if _, err := s.Unseal(sealed); err != nil {
			return nil, err
		}
		ds = append(ds, time.Since(start))
	}
	return ds, nil
}

func quantile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func mean(ds []time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

package vm

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/polis-os/polis/launch/image"
	"github.com/polis-os/polis/node/pid1"
)

// formatLine is PID 1's line after formatting the encrypted data disk.
var formatLine = regexp.MustCompile(`formatted the encrypted data disk \S+ \(.*\) as ext4 in (\S+) \(`)

// BenchmarkDataDisk measures the data disk inside a VM under TCG, with
// the same code on each kind of disk (cmd/polis-node's diskbench, see
// pid1.DiskBenchParameter), four machines booted at once, so that they
// share whatever else loads the host: plain ext4 (made on the host, as a
// disk from before encryption), encrypted as a node's is (dm-crypt, its
// key sealed by the VM's TPM), encrypted with dm-crypt's
// no_read_workqueue and no_write_workqueue (nowq), and encrypted with
// the journal zeroed at format, as before lazyjournal.go
// (zeroedjournal). Each reports, prefixed with its kind, sequential
// write and read throughput, the latency of a 4 KiB append with fsync,
// that of a single etcd member's Put on the disk, that of an unseal by
// the machine's TPM, and for the encrypted ones the first boot's format
// time (format-s). Run with -benchtime 1x (each iteration is a first
// boot of each) and -count for more samples.
//
//	go test -run '^$' -bench DataDisk -benchtime 1x -count 3 ./launch/vm
func BenchmarkDataDisk(b *testing.B) {
	qemu := needQEMU(b)
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		b.Skipf("no mkfs.ext4 to make the plain disk: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	// An output directory of its own: the default one is rebuilt by
	// other packages' tests (from other checkouts, on a shared machine)
	// while this benchmark boots machines from it.
	img, err := image.Build(ctx, image.Config{SourceDir: "../..", Progress: testLog{b}, OutDir: filepath.Join(b.TempDir(), "image")})
	if err != nil {
		b.Fatal(err)
	}
	kinds := []struct {
		name, mode string
		plain      bool
	}{
		{"plain", pid1.DiskBenchDefault, true},
		{"encrypted", pid1.DiskBenchDefault, false},
		{"nowq", pid1.DiskBenchNoWorkqueue, false},
		{"zeroedjournal", pid1.DiskBenchZeroedJournal, false},
	}
	for range b.N {
		// All kinds at once, each in a machine of its own: they share
		// whatever else loads the host, so their figures compare.
		// They also start measuring together, once every one has booted
		// (and formatted): the guests' clocks are the host's, from its
		// RTC, to the second.
		start := time.Now().Add(benchBootAllowance)
		var wg sync.WaitGroup
		results := make([]map[string]float64, len(kinds))
		errs := make([]error, len(kinds))
		for i, c := range kinds {
			wg.Go(func() { results[i], errs[i] = benchOne(ctx, b, qemu, mkfs, img, c.name, c.mode, c.plain, start) })
		}
		wg.Wait()
		for i, c := range kinds {
			if errs[i] != nil {
				b.Fatalf("%s: %v", c.name, errs[i])
			}
			for k, v := range results[i] {
				b.ReportMetric(v, c.name+"-"+k)
			}
		}
	}
}

// benchBootAllowance is how long after their start the machines begin to
// measure: enough for four first boots at once, formats included, on a
// loaded host (under load 17 the zeroed journal's format alone took 50 s).
const benchBootAllowance = 3 * time.Minute

// benchMetrics are the figures of the benchmark's line, by the unit they
// are reported in.
var benchMetrics = map[string]string{
	"write_MiBps": "write-MiB/s", "read_MiBps": "read-MiB/s",
	"fdatasync_p50_ms": "fsync-p50-ms", "fdatasync_p99_ms": "fsync-p99-ms",
	"etcd_put_p50_ms": "put-p50-ms", "etcd_put_p99_ms": "put-p99-ms", "etcd_put_mean_ms": "put-mean-ms",
	"tpm_unseal_p50_ms": "unseal-p50-ms",
}

// benchOne boots one machine of a kind and returns its figures.
func benchOne(ctx context.Context, b *testing.B, qemu, mkfs string, img *image.Image, name, mode string, plain bool, start time.Time) (map[string]float64, error) {
	dir := shortTempDir(b)
	if plain {
		data := filepath.Join(dir, "data.img")
		if err := os.WriteFile(data, nil, 0o600); err != nil {
			return nil, err
		}
		if err := os.Truncate(data, DataSize); err != nil {
			return nil, err
		}
		// Every table written now, so that the guest's lazy
		// initialisation does not run under the measurement; one inode
		// per 64 KiB, as PID 1 formats.
		if out, err := exec.Command(mkfs, "-q", "-F", "-L", "polis-data", "-i", "65536", "-E", "lazy_itable_init=0,lazy_journal_init=0", data).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("mkfs.ext4: %v\n%s", err, out)
		}
	}
	m, err := Start(Config{Name: name, Kernel: img.Kernel, Initramfs: img.Initramfs, QEMU: qemu, Dir: dir, Address: netip.MustParsePrefix("10.77.0.1/24"), DiskBench: mode, DiskBenchStart: start})
	if err != nil {
		return nil, err
	}
	line, err := m.WaitConsole(ctx, pid1.DiskBenchMessage)
	if err != nil {
		m.Kill()
		return nil, err
	}
	if err := m.Wait(ctx); err != nil {
		return nil, err
	}
	b.Logf("%s: %s", name, line)
	out := map[string]float64{}
	for _, f := range strings.Fields(line[strings.Index(line, pid1.DiskBenchMessage)+len(pid1.DiskBenchMessage):]) {
		k, v, _ := strings.Cut(f, "=")
		if x, err := strconv.ParseFloat(v, 64); err == nil && benchMetrics[k] != "" {
			out[benchMetrics[k]] = x
		}
	}
	if len(out) != len(benchMetrics) {
		return nil, fmt.Errorf("the benchmark's line lacks figures: %s", line)
	}
	console, err := os.ReadFile(filepath.Join(dir, "console.log"))
	if err != nil {
		return nil, err
	}
	for l := range strings.SplitSeq(string(console), "\n") {
		if m := formatLine.FindStringSubmatch(l); m != nil {
			b.Logf("%s: %s", name, strings.TrimSpace(l))
			if d, err := time.ParseDuration(m[1]); err == nil {
				out["format-s"] = d.Seconds()
			}
		}
	}
	return out, nil
}

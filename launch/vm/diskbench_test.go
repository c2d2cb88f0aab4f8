package vm

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/polis-os/polis/launch/image"
	"github.com/polis-os/polis/node/pid1"
)

// BenchmarkDataDisk measures the data disk inside a VM under TCG, with
// the same code on each kind of disk (cmd/polis-node's diskbench, see
// pid1.DiskBenchParameter): plain ext4 (made on the host, as a disk from
// before encryption), encrypted as a node's is (dm-crypt, its key sealed
// by the VM's TPM), and encrypted with dm-crypt's no_read_workqueue and
// no_write_workqueue. Each iteration boots a new machine and reports
// sequential write and read throughput, the latency of a 4 KiB append
// with fsync, that of a single etcd member's Put on the disk, and that
// of an unseal by the machine's TPM. Run
// with -benchtime 1x: each iteration is a first boot. The encrypted
// ones also report the first boot's format time (format-s), and one
// formats with the journal zeroed, as before lazyjournal.go.
//
//	go test -run '^$' -bench DataDisk -benchtime 1x ./launch/vm
//
// formatLine is PID 1's line after formatting the encrypted data disk.
var formatLine = regexp.MustCompile(`formatted the encrypted data disk \S+ \(.*\) as ext4 in (\S+) \(`)

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
	for _, c := range []struct {
		name, mode string
		plain      bool
	}{
		{"plain", pid1.DiskBenchDefault, true},
		{"encrypted", pid1.DiskBenchDefault, false},
		{"encrypted-no-workqueue", pid1.DiskBenchNoWorkqueue, false},
		{"encrypted-zeroed-journal", pid1.DiskBenchZeroedJournal, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				dir := shortTempDir(b)
				if c.plain {
					data := filepath.Join(dir, "data.img")
					if err := os.WriteFile(data, nil, 0o600); err != nil {
						b.Fatal(err)
					}
					if err := os.Truncate(data, DataSize); err != nil {
						b.Fatal(err)
					}
					// Every table written now, so that the guest's
					// lazy initialisation does not run under the
					// measurement; one inode per 64 KiB, as PID 1
					// formats.
					if out, err := exec.Command(mkfs, "-q", "-F", "-L", "polis-data", "-i", "65536", "-E", "lazy_itable_init=0,lazy_journal_init=0", data).CombinedOutput(); err != nil {
						b.Fatalf("mkfs.ext4: %v\n%s", err, out)
					}
				}
				m, err := Start(Config{Name: c.name, Kernel: img.Kernel, Initramfs: img.Initramfs, QEMU: qemu, Dir: dir, Address: netip.MustParsePrefix("10.77.0.1/24"), DiskBench: c.mode})
				if err != nil {
					b.Fatal(err)
				}
				line, err := m.WaitConsole(ctx, pid1.DiskBenchMessage)
				if err != nil {
					m.Kill()
					b.Fatal(err)
				}
				if err := m.Wait(ctx); err != nil {
					b.Fatal(err)
				}
				b.Logf("%s", line)
				console, err := os.ReadFile(filepath.Join(dir, "console.log"))
				if err != nil {
					b.Fatal(err)
				}
				for l := range strings.SplitSeq(string(console), "\n") {
					if strings.Contains(l, "formatted the encrypted data disk") || strings.Contains(l, "plain ext4") || strings.Contains(l, "loaded") && strings.Contains(l, "modules") {
						b.Logf("phase: %s", strings.TrimSpace(l))
					}
					if m := formatLine.FindStringSubmatch(l); m != nil {
						if d, err := time.ParseDuration(m[1]); err == nil {
							b.ReportMetric(d.Seconds(), "format-s")
						}
					}
				}
				fields := map[string]float64{}
				for _, f := range strings.Fields(line[strings.Index(line, pid1.DiskBenchMessage)+len(pid1.DiskBenchMessage):]) {
					k, v, _ := strings.Cut(f, "=")
					if x, err := strconv.ParseFloat(v, 64); err == nil {
						fields[k] = x
					}
				}
				for k, unit := range map[string]string{
					"write_MiBps": "write-MiB/s", "read_MiBps": "read-MiB/s",
					"fdatasync_p50_ms": "fsync-p50-ms", "fdatasync_p99_ms": "fsync-p99-ms",
					"etcd_put_p50_ms": "put-p50-ms", "etcd_put_p99_ms": "put-p99-ms", "etcd_put_mean_ms": "put-mean-ms",
					"tpm_unseal_p50_ms": "unseal-p50-ms",
				} {
					v, ok := fields[k]
					if !ok {
						b.Fatalf("the benchmark's line lacks %s: %s", k, line)
					}
					b.ReportMetric(v, unit)
				}
			}
		})
	}
}

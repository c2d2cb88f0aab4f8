package systembuild

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/polis-os/polis/kube/bundle"
	"github.com/polis-os/polis/node/pid1"
)

// Versions of the runtime, as noderuntime/go.mod requires them (a test
// checks they agree). They are also linked into the binaries, which
// report them with --version.
const (
	ContainerdVersion = "v2.4.2"
	RuncVersion       = "v1.5.2"
	CNIPluginsVersion = "v1.10.0"
	CoreDNSVersion    = "v1.15.0"
)

// PauseImage is the image reference that images/pause.tar carries: the pod
// sandbox image that containerd is configured with and that the node
// imports itself (ctr -n k8s.io images import). polis.internal is not a
// registry anyone can reach, so nothing ever tries to pull it. Change the
// tag when cmd/polis-pause changes, so that a node with the old image
// imported does not keep it under the same name.
const PauseImage = "polis.internal/pause:v1"

// The tree's layout, relative to its root: the pid1.System* paths below
// pid1.SystemRoot, so that the tree mounted there is where PID 1 and the
// kube/ code look.
var (
	BinDir       = relToRoot(pid1.SystemBinDir)
	CNIBinDir    = relToRoot(pid1.SystemCNIBinDir)
	ImagesDir    = relToRoot(pid1.SystemImagesDir)
	PauseArchive = relToRoot(pid1.SystemPauseImage)
	KubeBundle   = relToRoot(pid1.SystemKubeBundle)
)

func relToRoot(p string) string {
	r, err := filepath.Rel(pid1.SystemRoot, p)
	if err != nil || strings.HasPrefix(r, "..") {
		panic("systembuild: " + p + " is not below " + pid1.SystemRoot)
	}
	return r
}

// noderuntimeModule is the module path of noderuntime/go.mod.
const noderuntimeModule = "github.com/polis-os/polis/noderuntime"

// Builder builds the system tree. The zero value builds from the Polis
// source tree above the working directory, keeps its downloads in the
// user's cache directory and reports to os.Stderr.
type Builder struct {
	// SourceDir is a directory in the Polis source tree, whose root
	// (the main module's directory, with kubernetes/ and noderuntime/ in
	// it) FindSource finds from there; empty means the working directory.
	SourceDir string
	// CacheDir keeps what is not part of the tree between builds: the
	// busybox-static package and the pause binary (PauseBinary). Empty
	// means DefaultCacheDir.
	CacheDir string
	// Progress receives a line per step, and every half minute while a
	// long build runs; nil means os.Stderr.
	Progress io.Writer
}

// Build builds the system tree into outDir (created if needed) with the
// zero Builder.
func Build(ctx context.Context, outDir string) error {
	return Builder{}.Build(ctx, outDir)
}

// Files are the tree's regular files, relative to its root, in the order
// Build makes them: what the tests check. Besides them, NftDir holds
// Debian's nft with the libraries it needs on the build machine.
func Files() []string {
	files := []string{KubeBundle}
	for _, s := range steps() {
		for _, o := range s.outputs {
			files = append(files, filepath.Join(s.outDir, o))
		}
	}
	files = append(files, filepath.Join(BinDir, "mount"), filepath.Join(BinDir, "umount"), PauseArchive)
	return files
}

// Build builds the system tree into outDir: the Kubernetes bundle, the
// runtime's binaries, CoreDNS, Debian's nft (NftDir) and its launcher,
// mount and umount, and the pause image archive.
// outDir holds nothing else afterwards that Build did not put there
// before; files of other names in it are left alone.
func (b Builder) Build(ctx context.Context, outDir string) error {
	start := time.Now()
	progress := b.Progress
	if progress == nil {
		progress = os.Stderr
	}
	logf := func(format string, args ...any) { fmt.Fprintf(progress, "systembuild: "+format+"\n", args...) }
	src := b.SourceDir
	if src == "" {
		wd, err := os.Getwd()
		if err != nil {
			return err
		}
		src = wd
	}
	src, err := FindSource(src)
	if err != nil {
		return err
	}
	cache := b.CacheDir
	if cache == "" {
		var err error
		if cache, err = DefaultCacheDir(); err != nil {
			return err
		}
	}
	out, err := filepath.Abs(outDir)
	if err != nil {
		return err
	}
	for _, d := range []string{out, filepath.Join(out, BinDir), filepath.Join(out, CNIBinDir), filepath.Join(out, ImagesDir), cache} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("systembuild: %w", err)
		}
	}
	// Two builds at once (test packages run in parallel) would write the
	// same files: the second waits for the first, and then finds
	// everything up to date.
	unlock, err := lockDir(cache, logf)
	if err != nil {
		return fmt.Errorf("systembuild: %w", err)
	}
	defer unlock()
	if err := checkCgoTools(ctx); err != nil {
		return fmt.Errorf("systembuild: %w", err)
	}
	if _, err := os.Stat(NftProgram); err != nil {
		// Before the long builds, as installNft would fail after them.
		return fmt.Errorf("systembuild: kube-proxy's nftables mode needs Debian's nft, and %s is missing: install it as root with: apt-get install %s (scripts/test does)", NftProgram, NftPackage)
	}
	logf("building the system tree into %s", out)

	if err := keepTimesIfUnchanged([]string{filepath.Join(out, KubeBundle)}, func() error {
		_, err := bundle.Builder{ModuleDir: filepath.Join(src, "kubernetes"), Progress: progress}.Build(ctx, filepath.Join(out, BinDir))
		return err
	}); err != nil {
		return fmt.Errorf("systembuild: %w", err)
	}
	for _, s := range steps() {
		var outputs []string
		for _, o := range s.outputs {
			outputs = append(outputs, filepath.Join(out, s.outDir, o))
		}
		if err := keepTimesIfUnchanged(outputs, func() error { return goBuild(ctx, src, out, s, logf) }); err != nil {
			return fmt.Errorf("systembuild: %w", err)
		}
	}

	if _, err := installNft(ctx, out, logf); err != nil {
		return fmt.Errorf("systembuild: %w", err)
	}

	busybox, err := fetchBusybox(ctx, filepath.Join(cache, "deb"), logf)
	if err != nil {
		return fmt.Errorf("systembuild: %w", err)
	}
	bb, err := os.ReadFile(busybox)
	if err != nil {
		return fmt.Errorf("systembuild: %w", err)
	}
	for _, name := range []string{"mount", "umount"} {
		if _, err := writeIfChanged(filepath.Join(out, BinDir, name), bb, 0o755); err != nil {
			return fmt.Errorf("systembuild: %w", err)
		}
	}

	if err := goBuild(ctx, src, cache, pauseStep, logf); err != nil {
		return fmt.Errorf("systembuild: %w", err)
	}
	pause, err := os.ReadFile(PauseBinary(cache))
	if err != nil {
		return fmt.Errorf("systembuild: %w", err)
	}
	archive, err := PauseArchiveBytes(pause)
	if err != nil {
		return fmt.Errorf("systembuild: the pause image: %w", err)
	}
	if _, err := writeIfChanged(filepath.Join(out, PauseArchive), archive, 0o644); err != nil {
		return fmt.Errorf("systembuild: %w", err)
	}

	for _, f := range Files() {
		if f == PauseArchive {
			continue
		}
		if err := checkStatic(filepath.Join(out, f)); err != nil {
			return fmt.Errorf("systembuild: %w", err)
		}
	}
	logf("built the system tree in %s", time.Since(start).Round(time.Second))
	return nil
}

// FindSource returns the root of the Polis source tree that contains dir:
// the nearest directory at or above dir with the main module's go.mod and
// the noderuntime/ module.
func FindSource(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for d := abs; ; d = filepath.Dir(d) {
		root, rerr := os.ReadFile(filepath.Join(d, "go.mod"))
		nr, nerr := os.ReadFile(filepath.Join(d, "noderuntime", "go.mod"))
		if rerr == nil && nerr == nil && strings.Contains(string(root), "module github.com/polis-os/polis\n") && strings.Contains(string(nr), "module "+noderuntimeModule+"\n") {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("systembuild: no Polis source tree (go.mod and noderuntime/go.mod) in " + dir + " or above: run from the Polis source tree")
		}
	}
}

// DefaultCacheDir is the cache directory of a Builder without one:
// polis/system in the user's cache directory.
func DefaultCacheDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("systembuild: no cache directory given and none found: %w", err)
	}
	return filepath.Join(d, "polis", "system"), nil
}

// PauseBinary is where Build leaves the pause binary in its cache
// directory (outside the tree: the tree holds only the image made of it).
func PauseBinary(cacheDir string) string { return filepath.Join(cacheDir, pauseStep.outputs[0]) }

// OutDirForTests is where tests (and scripts/test, which builds the tree
// before them) keep the system tree: $POLIS_SYSTEM_DIR, or polis/system-tree
// in the user's cache directory.
func OutDirForTests() string {
	if d := os.Getenv("POLIS_SYSTEM_DIR"); d != "" {
		return d
	}
	d, err := os.UserCacheDir()
	if err != nil {
		d = os.TempDir()
	}
	return filepath.Join(d, "polis", "system-tree")
}

// lockDir takes an exclusive lock on dir until the returned func is called.
func lockDir(dir string, logf func(string, ...any)) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("locking %s: %w", dir, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		logf("waiting for another build using %s", dir)
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", dir, err)
		}
	}
	return func() { f.Close() }, nil // closing releases the lock
}

// writeIfChanged writes data to path unless the file already holds exactly
// data with mode perm, and reports whether it wrote. It writes a temporary
// file and renames it, so an interrupted build never leaves a half-written
// file that looks current.
func writeIfChanged(path string, data []byte, perm os.FileMode) (bool, error) {
	if old, err := os.ReadFile(path); err == nil && string(old) == string(data) {
		if st, err := os.Stat(path); err == nil && st.Mode().Perm() == perm {
			return false, nil
		}
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return false, err
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return false, err
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return false, err
	}
	if err := tmp.Close(); err != nil {
		return false, err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return false, err
	}
	return true, nil
}

// checkStatic refuses a file that is not a statically linked ELF
// executable: the system disk has no loader or libc for it.
func checkStatic(p string) error {
	f, err := elf.Open(p)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return fmt.Errorf("%s is not an executable (ELF type %v)", p, f.Type)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked", p)
		}
	}
	return nil
}

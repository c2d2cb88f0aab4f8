// Package bundle builds the Kubernetes bundle: the polis-kube binary of the
// kubernetes/ module (kube-apiserver, kube-controller-manager,
// kube-scheduler, kubelet and kubectl, one subcommand each), with the
// Kubernetes version set at link time. kubelet builds with CGO_ENABLED=0
// like the rest; the bundle goes onto the node's system disk
// (launch/systembuild), where the worker nodes run its kubelet.
//
// # Why a build step of its own
//
// The bundle is built from k8s.io/kubernetes, about two thousand packages:
// the first build takes a quarter of an hour or more on two cores and
// gigabytes of memory, where the rest of Polis builds in a minute. So it
// lives in a Go module of its own (kubernetes/, skipped by ./... here), and
// it is built by this package, which is the one place that knows the flags:
// the link-time version variables (without them kubectl and client-go cannot
// parse the server's version), static linking, -trimpath. Go's build cache
// does the rest: a second build with nothing changed compiles nothing and,
// when the output binary is still there, does not even relink, so it takes
// seconds.
//
// Nothing in the node agent or the launcher builds the bundle implicitly: a
// cluster without Kubernetes never waits for it.
package bundle

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Kubernetes release built into the bundle; kubernetes/go.mod requires
// k8s.io/kubernetes at this version (the test checks they agree).
const (
	Version = "v1.37.1"
	major   = "1"
	minor   = "37"
)

// Binary is the file name of the bundle in the output directory.
const Binary = "polis-kube"

// modulePath is the module path of kubernetes/go.mod.
const modulePath = "github.com/polis-os/polis/kubernetes"

// progressEvery is how often a running build reports that it goes on.
const progressEvery = 30 * time.Second

// Builder builds the bundle. The zero value builds from the kubernetes/
// module found above the working directory, reporting to os.Stderr.
type Builder struct {
	// ModuleDir is the kubernetes/ module's directory; empty means
	// FindModule from the working directory.
	ModuleDir string
	// Progress receives a line when the build starts, every
	// half minute while it runs, and when it ends; nil means os.Stderr.
	Progress io.Writer
}

// Build builds the bundle into outDir (created if needed) with the zero
// Builder and returns the binary's path.
func Build(ctx context.Context, outDir string) (string, error) {
	return Builder{}.Build(ctx, outDir)
}

// LDFlags are the linker flags of the bundle: stripped, with the version
// variables of both component-base (servers, kubectl's server side) and
// client-go (kubectl's client version).
func LDFlags() string {
	flags := []string{"-s", "-w"}
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		for _, kv := range [][2]string{
			{"gitVersion", Version},
			{"gitMajor", major},
			{"gitMinor", minor},
			{"gitTreeState", "clean"},
			// A fixed date keeps the binary reproducible, so that Go's
			// cache can tell it is up to date.
			{"buildDate", "1970-01-01T00:00:00Z"},
		} {
			flags = append(flags, "-X", pkg+"."+kv[0]+"="+kv[1])
		}
	}
	return strings.Join(flags, " ")
}

// Build builds the bundle into outDir and returns the binary's path.
func (b Builder) Build(ctx context.Context, outDir string) (string, error) {
	dir := b.ModuleDir
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", err
		}
		if dir, err = FindModule(wd); err != nil {
			return "", err
		}
	}
	progress := b.Progress
	if progress == nil {
		progress = os.Stderr
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", fmt.Errorf("bundle: output directory: %w", err)
	}
	out, err := filepath.Abs(filepath.Join(outDir, Binary))
	if err != nil {
		return "", err
	}

	// -v names each package as it is compiled (cached ones are not named),
	// which is the progress reported.
	cmd := exec.CommandContext(ctx, "go", "build", "-v", "-buildvcs=false", "-trimpath", "-ldflags", LDFlags(), "-o", out, "./cmd/polis-kube")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return "", err
	}
	start := time.Now()
	fmt.Fprintf(progress, "bundle: building Kubernetes %s into %s (the first build takes about 7 minutes on two idle cores, longer on a busy machine; later ones seconds)\n", Version, out)
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("bundle: starting go build: %w", err)
	}

	var (
		mu       sync.Mutex
		compiled int
		tail     []string // the last lines, for the error
	)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			mu.Lock()
			line := sc.Text()
			if isPackageLine(line) {
				compiled++
			} else {
				tail = append(tail, line)
				if len(tail) > 40 {
					tail = tail[1:]
				}
			}
			mu.Unlock()
		}
	}()
	tick := time.NewTicker(progressEvery)
	defer tick.Stop()
	waited := make(chan error, 1)
	go func() {
		<-scanned // Wait closes the pipe: read it to the end first
		waited <- cmd.Wait()
	}()
	for {
		select {
		case <-tick.C:
			mu.Lock()
			fmt.Fprintf(progress, "bundle: %d packages compiled, %s elapsed\n", compiled, time.Since(start).Round(time.Second))
			mu.Unlock()
		case err := <-waited:
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				return "", fmt.Errorf("bundle: go build in %s: %w\n%s", dir, err, strings.Join(tail, "\n"))
			}
			fmt.Fprintf(progress, "bundle: built %s in %s (%d packages compiled)\n", out, time.Since(start).Round(time.Second), compiled)
			return out, nil
		}
	}
}

// isPackageLine reports whether a line of go build -v names a package (an
// import path), rather than being a compiler or linker message.
func isPackageLine(line string) bool {
	return line != "" && !strings.ContainsAny(line, " \t:") && !strings.HasPrefix(line, "#")
}

// FindModule returns the kubernetes/ module directory of the Polis source
// tree that contains dir (or dir's ancestors).
func FindModule(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for d := abs; ; d = filepath.Dir(d) {
		cand := filepath.Join(d, "kubernetes")
		if data, err := os.ReadFile(filepath.Join(cand, "go.mod")); err == nil && strings.Contains(string(data), "module "+modulePath+"\n") {
			return cand, nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("bundle: no kubernetes/ module (" + modulePath + ") in " + dir + " or above: run from the Polis source tree")
		}
	}
}

// OutDirForTests is where tests (and scripts/test, which builds the bundle
// before them) keep the bundle: $POLIS_KUBE_BUNDLE_DIR, or polis/kube-bundle
// in the user's cache directory, so that every test package shares one
// binary and the link is not repeated.
func OutDirForTests() string {
	if d := os.Getenv("POLIS_KUBE_BUNDLE_DIR"); d != "" {
		return d
	}
	d, err := os.UserCacheDir()
	if err != nil {
		d = os.TempDir()
	}
	return filepath.Join(d, "polis", "kube-bundle")
}

package systembuild

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// step is one go build: packages of one module, built with the same
// settings into one directory of the tree.
type step struct {
	// name says what is built, for the progress lines.
	name string
	// module is the module's directory below the source root ("" for the
	// main module).
	module string
	// packages are the main packages to build; outputs the names of their
	// binaries (with several packages, the names go build gives them: the
	// last element of each import path).
	packages, outputs []string
	// outDir is the directory below the output root they go to.
	outDir string
	// cgo builds with CGO_ENABLED=1 and links statically.
	cgo bool
	// tags are the build tags; ldflags the linker flags after -s -w.
	tags    []string
	ldflags []string
}

// steps are the go builds of the tree, after the bundle.
func steps() []step {
	const (
		containerd = "github.com/containerd/containerd/v2"
		cni        = "github.com/containernetworking/plugins"
	)
	return []step{
		{
			name:     "containerd " + ContainerdVersion,
			module:   "noderuntime",
			packages: []string{containerd + "/cmd/containerd", containerd + "/cmd/containerd-shim-runc-v2", containerd + "/cmd/ctr"},
			outputs:  []string{"containerd", "containerd-shim-runc-v2", "ctr"},
			outDir:   BinDir,
			ldflags:  []string{"-X", containerd + "/version.Version=" + ContainerdVersion},
		},
		{
			name:     "runc " + RuncVersion,
			module:   "noderuntime",
			packages: []string{"github.com/opencontainers/runc"},
			outputs:  []string{"runc"},
			outDir:   BinDir,
			cgo:      true,
			// seccomp: Pods may ask for seccomp profiles (see the package
			// doc); urfave_cli_no_docs leaves out the man page generator;
			// netgo and osusergo keep glibc's NSS, which cannot work in a
			// static binary, out of the link. Its version comes from the
			// module's VERSION file.
			tags: []string{"seccomp", "urfave_cli_no_docs", "netgo", "osusergo"},
		},
		{
			// Polis' own main with CoreDNS' plugins the node needs
			// (noderuntime/cmd/polis-coredns); it reports CoreDNS'
			// version itself.
			name:     "CoreDNS " + CoreDNSVersion,
			module:   "noderuntime",
			packages: []string{noderuntimeModule + "/cmd/polis-coredns"},
			outputs:  []string{"polis-coredns"},
			outDir:   BinDir,
		},
		{
			// Runs Debian's nft from NftDir: see cmd/polis-nft.
			name:     "polis-nft",
			packages: []string{"./cmd/polis-nft"},
			outputs:  []string{"nft"},
			outDir:   BinDir,
		},
		{
			name:   "the CNI plugins " + CNIPluginsVersion,
			module: "noderuntime",
			packages: []string{
				cni + "/plugins/main/bridge", cni + "/plugins/ipam/host-local",
				cni + "/plugins/main/loopback", cni + "/plugins/meta/portmap",
			},
			outputs: []string{"bridge", "host-local", "loopback", "portmap"},
			outDir:  CNIBinDir,
			ldflags: []string{"-X", cni + "/pkg/utils/buildversion.BuildVersion=" + CNIPluginsVersion},
		},
	}
}

// pauseStep builds the pause image's process, into the cache directory:
// only the image archive made from it goes into the tree.
var pauseStep = step{
	name:     "polis-pause",
	packages: []string{"./cmd/polis-pause"},
	outputs:  []string{"polis-pause"},
}

// args are the go build arguments of s, writing into dir.
func (s step) args(dir string) []string {
	ldflags := []string{"-s", "-w"}
	if s.cgo {
		ldflags = append(ldflags, "-extldflags", "-static")
	}
	ldflags = append(ldflags, s.ldflags...)
	args := []string{"build", "-v", "-buildvcs=false", "-trimpath"}
	if len(s.tags) > 0 {
		args = append(args, "-tags", strings.Join(s.tags, ","))
	}
	args = append(args, "-ldflags", strings.Join(ldflags, " "))
	out := dir
	if len(s.packages) > 1 {
		// go build -o DIR/ puts each package's binary in DIR.
		out += string(filepath.Separator)
	} else {
		out = filepath.Join(dir, s.outputs[0])
	}
	args = append(args, "-o", out)
	return append(args, s.packages...)
}

// env is the environment of s's go build.
func (s step) env() []string {
	cgo := "CGO_ENABLED=0"
	if s.cgo {
		cgo = "CGO_ENABLED=1"
	}
	return append(os.Environ(), cgo)
}

// goBuild runs s's go build into outRoot/s.outDir, reporting progress.
func goBuild(ctx context.Context, src, outRoot string, s step, logf func(string, ...any)) error {
	dir := filepath.Join(outRoot, s.outDir)
	cmd := exec.CommandContext(ctx, "go", s.args(dir)...)
	cmd.Dir = filepath.Join(src, s.module)
	cmd.Env = s.env()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	start := time.Now()
	logf("building %s", s.name)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting go build of %s: %w", s.name, err)
	}
	// -v names each package compiled (not those from the cache): that
	// count is the progress; other lines are kept for the error.
	var (
		mu       sync.Mutex
		compiled int
		tail     []string
	)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			mu.Lock()
			if line != "" && !strings.ContainsAny(line, " \t:") && !strings.HasPrefix(line, "#") {
				compiled++
			} else if tail = append(tail, line); len(tail) > 40 {
				tail = tail[1:]
			}
			mu.Unlock()
		}
	}()
	waited := make(chan error, 1)
	go func() {
		<-scanned // Wait closes the pipe: read it to the end first
		waited <- cmd.Wait()
	}()
	tick := time.NewTicker(progressEvery)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			mu.Lock()
			logf("%s: %d packages compiled, %s elapsed", s.name, compiled, time.Since(start).Round(time.Second))
			mu.Unlock()
		case err := <-waited:
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				return fmt.Errorf("go build of %s in %s: %w\n%s", s.name, cmd.Dir, err, strings.Join(tail, "\n"))
			}
			logf("built %s in %s (%d packages compiled)", s.name, time.Since(start).Round(100*time.Millisecond), compiled)
			return nil
		}
	}
}

// progressEvery is how often a running go build reports that it goes on.
const progressEvery = 30 * time.Second

// checkCgoTools fails early, with what to install, when runc's static cgo
// build cannot work: it needs a C compiler, glibc's static libraries and
// libseccomp's, found through pkg-config.
func checkCgoTools(ctx context.Context) error {
	const install = "install them as root with: apt-get install gcc libc6-dev libseccomp-dev pkg-config (scripts/test does)"
	for _, tool := range []string{"gcc", "pkg-config"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("runc's static build needs %s, which is missing; %s", tool, install)
		}
	}
	out, err := exec.CommandContext(ctx, "pkg-config", "--variable=libdir", "libseccomp").Output()
	if err != nil {
		return fmt.Errorf("runc's static build needs libseccomp's development files, which pkg-config does not find; %s", install)
	}
	if _, err := os.Stat(filepath.Join(strings.TrimSpace(string(out)), "libseccomp.a")); err != nil {
		return fmt.Errorf("runc's static build needs libseccomp.a: %w; %s", err, install)
	}
	return nil
}

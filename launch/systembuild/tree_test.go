package systembuild

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/kube/bundle"
)

// TestBuildTree builds the system tree where scripts/test puts it (from
// Go's build cache when warm; the first build on a machine takes a quarter
// of an hour or more, which is why scripts/test builds it before the
// tests), checks every binary is a static executable that runs here, that
// pause.tar is the pause image, and that a second build changes nothing.
func TestBuildTree(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the Kubernetes bundle, containerd, runc and the CNI plugins; not with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	out := OutDirForTests()
	cache, err := DefaultCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	start := time.Now()
	err = Builder{CacheDir: cache, Progress: &progress}.Build(ctx, out)
	t.Logf("first build, %s:\n%s", time.Since(start).Round(time.Millisecond), progress.String())
	if err != nil {
		t.Fatalf("Build: %v", err)
	}

	files := Files()
	for _, f := range files {
		if f == PauseArchive {
			continue
		}
		if err := checkStatic(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	// What each binary says of itself: its version where it has one,
	// which also shows that the version flags reached the link.
	bin := func(name string) string { return filepath.Join(out, BinDir, name) }
	cni := func(name string) string { return filepath.Join(out, CNIBinDir, name) }
	for _, c := range []struct {
		path string
		args []string
		env  string
		want string
		// exitsNonZero: the command prints what is checked and fails.
		exitsNonZero bool
	}{
		{bin("polis-kube"), []string{"version"}, "", bundle.Version, false},
		{bin("polis-kube"), []string{"kubelet", "--version"}, "", "Kubernetes " + bundle.Version, false},
		{bin("containerd"), []string{"--version"}, "", ContainerdVersion, false},
		{bin("containerd-shim-runc-v2"), []string{"-v"}, "", ContainerdVersion, false},
		{bin("ctr"), []string{"--version"}, "", ContainerdVersion, false},
		{bin("runc"), []string{"--version"}, "", "runc version " + strings.TrimPrefix(RuncVersion, "v"), false},
		{bin("runc"), []string{"--version"}, "", "libseccomp: ", false},
		{bin("polis-kube"), []string{"proxy", "--version"}, "", "Kubernetes " + bundle.Version, false},
		{bin("polis-coredns"), []string{"-version"}, "", "CoreDNS-" + strings.TrimPrefix(CoreDNSVersion, "v"), false},
		{bin("nft"), []string{"--version"}, "", "nftables v", false},
		{bin("mount"), []string{"--help"}, "", "Usage: mount", false},
		{bin("umount"), []string{"--help"}, "", "Usage: umount", false},
		{cni("bridge"), nil, "CNI_COMMAND=VERSION", `"supportedVersions"`, false},
		{cni("host-local"), nil, "CNI_COMMAND=VERSION", `"supportedVersions"`, false},
		{cni("loopback"), nil, "CNI_COMMAND=VERSION", `"supportedVersions"`, false},
		{cni("portmap"), nil, "CNI_COMMAND=VERSION", `"supportedVersions"`, false},
		// Without CNI_COMMAND a plugin names itself and its version.
		{cni("bridge"), nil, "", "CNI bridge plugin " + CNIPluginsVersion, true},
	} {
		cmd := exec.CommandContext(ctx, c.path, c.args...)
		cmd.Env = os.Environ()
		if c.env != "" {
			cmd.Env = append(cmd.Env, c.env)
		}
		got, err := cmd.CombinedOutput()
		if err != nil && !c.exitsNonZero {
			t.Errorf("%s %s: %v\n%s", c.path, strings.Join(c.args, " "), err, got)
			continue
		}
		if !strings.Contains(string(got), c.want) {
			t.Errorf("%s %s %s said:\n%s\nwant it to contain %q", c.env, c.path, strings.Join(c.args, " "), got, c.want)
		}
	}

	archive, err := os.ReadFile(filepath.Join(out, PauseArchive))
	if err != nil {
		t.Fatal(err)
	}
	pause, err := os.ReadFile(PauseBinary(cache))
	if err != nil {
		t.Fatal(err)
	}
	if err := checkStatic(PauseBinary(cache)); err != nil {
		t.Error(err)
	}
	checkPauseArchive(t, archive, pause)

	// A second build with nothing changed must leave every file as it
	// was: no relink, no rewrite (an image builder would see new files).
	before := modTimes(t, out, files)
	progress.Reset()
	start = time.Now()
	if err := (Builder{CacheDir: cache, Progress: &progress}).Build(ctx, out); err != nil {
		t.Fatalf("second Build: %v", err)
	}
	t.Logf("second build, %s:\n%s", time.Since(start).Round(time.Millisecond), progress.String())
	after := modTimes(t, out, files)
	for _, f := range files {
		if !before[f].Equal(after[f]) {
			t.Errorf("the second build rewrote %s (%v, was %v)", f, after[f], before[f])
		}
	}

	t.Run("containerd runs the pause image", func(t *testing.T) {
		testContainerd(ctx, t, out)
	})
}

func modTimes(t *testing.T, root string, files []string) map[string]time.Time {
	t.Helper()
	m := make(map[string]time.Time)
	for _, f := range files {
		st, err := os.Stat(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		m[f] = st.ModTime()
	}
	return m
}

// testContainerd runs the tree's containerd on this host (root only;
// without its Kubernetes plugins, which want a machine this host is not),
// imports pause.tar with the tree's ctr, as a node does, into the
// namespace kubelet uses, and runs it as a container through the shim and
// runc of the tree: it must run until SIGTERM and then exit 0.
func testContainerd(ctx context.Context, t *testing.T, out string) {
	if os.Geteuid() != 0 {
		t.Skip("containerd needs root")
	}
	dir, err := os.MkdirTemp("", "ctrd") // short: the socket path has a length limit
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "c.sock")
	config := fmt.Sprintf(`version = 3
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images"]
[grpc]
  address = %q
[ttrpc]
  address = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), sock, sock+".ttrpc")
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	ctrd := exec.Command(filepath.Join(out, BinDir, "containerd"), "--config", filepath.Join(dir, "config.toml"))
	ctrd.Stdout, ctrd.Stderr = &log, &log
	// The shim finds runc in containerd's PATH, as on a node.
	ctrd.Env = append(os.Environ(), "PATH="+filepath.Join(out, BinDir)+":"+os.Getenv("PATH"))
	if err := ctrd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- ctrd.Wait() }()
	defer func() {
		_ = ctrd.Process.Signal(unix.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = ctrd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("containerd's log:\n%s", log.String())
		}
	}()
	ctr := func(args ...string) (string, error) {
		b, err := exec.CommandContext(ctx, filepath.Join(out, BinDir, "ctr"), append([]string{"--address", sock, "--namespace", "k8s.io"}, args...)...).CombinedOutput()
		return string(b), err
	}
	testutil.Eventually(t, 2*time.Minute, "containerd answering", func() error {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("containerd exited: %v", err)
		default:
		}
		if out, err := ctr("version"); err != nil {
			return fmt.Errorf("ctr version: %w: %s", err, out)
		}
		return nil
	})
	// --no-unpack: unpacking needs a snapshotter this host may lack
	// (overlayfs on overlayfs); the node unpacks when it runs the sandbox.
	if got, err := ctr("images", "import", "--no-unpack", filepath.Join(out, PauseArchive)); err != nil {
		t.Fatalf("ctr images import: %v\n%s", err, got)
	}
	got, err := ctr("images", "ls", "-q")
	if err != nil {
		t.Fatalf("ctr images ls: %v\n%s", err, got)
	}
	if !strings.Contains("\n"+got, "\n"+PauseImage+"\n") {
		t.Fatalf("after the import, containerd holds:\n%s\nwant %s", got, PauseImage)
	}

	// The native snapshotter (plain copies) works on any host filesystem;
	// ctr run in the foreground exits with the container's status.
	const id = "pause-test"
	run := exec.CommandContext(ctx, filepath.Join(out, BinDir, "ctr"), "--address", sock, "--namespace", "k8s.io", "run", "--rm", "--snapshotter", "native", PauseImage, id)
	var runOut bytes.Buffer
	run.Stdout, run.Stderr = &runOut, &runOut
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- run.Wait() }()
	defer func() {
		// Whatever happened, leave no container (or shim) behind.
		_, _ = ctr("task", "kill", "--signal", "SIGKILL", id)
		select {
		case <-ran:
		case <-time.After(30 * time.Second):
			_ = run.Process.Kill()
			<-ran
		}
		if t.Failed() { // ctr run has ended: its output may be read
			t.Logf("ctr run's output:\n%s", runOut.String())
		}
		_, _ = ctr("task", "delete", "--force", id)
		_, _ = ctr("container", "delete", id)
	}()
	testutil.Eventually(t, 2*time.Minute, "the pause container running", func() error {
		tasks, _ := ctr("task", "ls")
		if strings.Contains(tasks, id) && strings.Contains(tasks, "RUNNING") {
			return nil
		}
		select {
		case err := <-ran:
			ran <- err
			t.Fatalf("ctr run ended before the task ran: %v\n%s", err, runOut.String())
		default:
		}
		return fmt.Errorf("tasks:\n%s", tasks) // not runOut, which ctr run still writes: logged at the end
	})
	if got, err := ctr("task", "kill", "--signal", "SIGTERM", id); err != nil {
		t.Fatalf("ctr task kill: %v\n%s", err, got)
	}
	select {
	case err := <-ran:
		ran <- err // for the deferred cleanup
		if err != nil {
			t.Errorf("the pause container after SIGTERM: %v, want exit 0\n%s", err, runOut.String())
		}
	case <-time.After(time.Minute):
		t.Errorf("the pause container still runs a minute after SIGTERM")
	}
}

package bundle

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestVersionMatchesModule fails when kubernetes/go.mod and Version tell
// different Kubernetes releases: the binary would then claim a version it
// is not.
func TestVersionMatchesModule(t *testing.T) {
	dir, err := FindModule(".")
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(gomod), "\tk8s.io/kubernetes "+Version+"\n") {
		t.Errorf("kubernetes/go.mod does not require k8s.io/kubernetes %s", Version)
	}
	if want := "v" + major + "." + minor + "."; !strings.HasPrefix(Version, want) {
		t.Errorf("Version %s does not start with %s", Version, want)
	}
}

func TestFindModuleOutsideTheTree(t *testing.T) {
	if _, err := FindModule(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no kubernetes/ module") {
		t.Errorf("FindModule outside the tree: %v", err)
	}
}

// TestBuild builds the bundle (from Go's build cache when warm; the first
// build on a machine takes a quarter of an hour or more, which is why
// scripts/test builds it before the tests) and checks that it reports its
// version and knows its components.
func TestBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the Kubernetes bundle; not with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	out := OutDirForTests()
	var progress bytes.Buffer
	path, err := Builder{Progress: &progress}.Build(ctx, out)
	t.Log(progress.String())
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	got, err := exec.CommandContext(ctx, path, "version").Output()
	if err != nil {
		t.Fatalf("%s version: %v", path, err)
	}
	if strings.TrimSpace(string(got)) != Version {
		t.Errorf("%s version = %q, want %s", path, got, Version)
	}
	cmd := exec.CommandContext(ctx, path, "nonsense")
	usage, err := cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != 2 || !strings.Contains(string(usage), "apiserver|controller-manager|kubectl|kubelet|proxy|scheduler|version") {
		t.Errorf("an unknown component: exit %v, %v, %q; want exit 2 and the usage", cmd.ProcessState.ExitCode(), err, usage)
	}
	kubelet, err := exec.CommandContext(ctx, path, "kubelet", "--version").Output()
	if err != nil {
		t.Fatalf("kubelet --version: %v", err)
	}
	if strings.TrimSpace(string(kubelet)) != "Kubernetes "+Version {
		t.Errorf("kubelet --version = %q, want Kubernetes %s", kubelet, Version)
	}
	kubectl, err := exec.CommandContext(ctx, path, "kubectl", "version", "--client", "-o", "json").Output()
	if err != nil {
		t.Fatalf("kubectl version: %v", err)
	}
	if !bytes.Contains(kubectl, []byte(`"gitVersion": "`+Version+`"`)) {
		t.Errorf("kubectl's client version:\n%s\nwant gitVersion %s", kubectl, Version)
	}
}

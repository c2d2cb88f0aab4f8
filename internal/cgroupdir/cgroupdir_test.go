package cgroupdir

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The tests run on plain directories standing in for cgroupfs: the files
// have the same names, and only the kernel gives them their meaning.

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A parent and its child are made, again without complaint; below a
// missing directory (no cgroupfs there) nothing is made, and the error
// names the cgroup that could not be.
func TestMake(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "kube-services")
	dir := filepath.Join(parent, "proxy")
	for range 2 {
		if err := Make(parent, dir); err != nil {
			t.Fatal(err)
		}
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		t.Errorf("the cgroup %s: %v, %v", dir, st, err)
	}
	missing := filepath.Join(t.TempDir(), "no-mount", "kube-services")
	if err := Make(missing, filepath.Join(missing, "proxy")); err == nil || !strings.Contains(err.Error(), "creating cgroup "+missing) {
		t.Errorf("Make under a missing directory: %v, want an error naming %s", err, missing)
	}
}

// Open gives the directory itself, and an error naming one that is not
// there.
func TestOpen(t *testing.T) {
	dir := t.TempDir()
	f, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.IsDir() || f.Name() != dir {
		t.Errorf("opened %s (%v, %v), want the directory %s", f.Name(), st, err, dir)
	}
	gone := filepath.Join(dir, "gone")
	if _, err := Open(gone); err == nil || !strings.Contains(err.Error(), "opening cgroup "+gone) {
		t.Errorf("Open(%s) = %v, want an error naming it", gone, err)
	}
}

// Asked for some controllers, a cgroup enables for its children those of
// them it has, and none it lacks, and says which it lacks; asked for none
// in particular, every one it has, in its order. A cgroup whose
// controllers cannot be read, or set, is an error that says which.
func TestEnableControllers(t *testing.T) {
	accounted := []string{"cpu", "memory"}
	for _, tc := range []struct {
		name, controllers string // "" controllers: no cgroup.controllers file
		want              []string
		wantEnabled       string // "": no cgroup.subtree_control written
		wantMissing       string
		wantErr           string
	}{
		{"all", "cpuset cpu io memory hugetlb pids", accounted, "+cpu +memory", "", ""},
		{"no memory", "cpu pids", accounted, "+cpu", `has the controllers "cpu pids", not all of [cpu memory]`, ""},
		{"none", "pids", accounted, "", `not all of [cpu memory]`, ""},
		{"unreadable", "", accounted, "", "", "reading the controllers of"},
		{"every one", "cpuset cpu io memory pids", nil, "+cpuset +cpu +io +memory +pids", "", ""},
		{"nothing offered", "\n", nil, "", "", ""},
		{"unreadable, every one", "", nil, "", "", "reading the controllers of"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.controllers != "" {
				writeFile(t, filepath.Join(dir, "cgroup.controllers"), tc.controllers+"\n")
			}
			missing, err := EnableControllers(dir, tc.want)
			if (tc.wantErr == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.wantErr+" "+dir) {
				t.Errorf("error %v, want %q naming %s", err, tc.wantErr, dir)
			}
			if (tc.wantMissing == "") != (missing == "") || !strings.Contains(missing, tc.wantMissing) {
				t.Errorf("missing %q, want %q", missing, tc.wantMissing)
			}
			got, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
			if tc.wantEnabled == "" && !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("wrote %q (%v) to cgroup.subtree_control, want nothing", got, err)
			}
			if tc.wantEnabled != "" && string(got) != tc.wantEnabled {
				t.Errorf("enabled %q (%v) for the children, want %q", got, err, tc.wantEnabled)
			}
		})
	}
	// cgroup.subtree_control refusing the write (a directory here) is an
	// error too, and what is missing is still said.
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "cgroup.controllers"), "cpu\n")
	if err := os.Mkdir(filepath.Join(dir, "cgroup.subtree_control"), 0o755); err != nil {
		t.Fatal(err)
	}
	missing, err := EnableControllers(dir, accounted)
	if err == nil || !strings.Contains(err.Error(), "enabling +cpu in "+dir) || !strings.Contains(missing, "not all of") {
		t.Errorf("a write refused: %v (missing %q), want an error saying what was enabled where", err, missing)
	}
}

// The weight is written where the parent enables the cpu controller for
// its children, and only there; otherwise the reason says what the parent
// enables.
func TestSetCPUWeight(t *testing.T) {
	for name, tc := range map[string]struct {
		subtreeControl *string // nil: no such file
		weighted       bool
		says           string
	}{
		"cpu enabled":      {subtreeControl: ptr("cpuset cpu io memory pids\n"), weighted: true},
		"cpu not there":    {subtreeControl: ptr("memory pids\n"), says: `the cpu controller is not enabled in `},
		"none enabled":     {subtreeControl: ptr(""), says: `(cgroup.subtree_control "")`},
		"no such file":     {says: `the cpu controller is not enabled in `},
		"cpuset is not":    {subtreeControl: ptr("cpuset\n"), says: `"cpuset"`},
		"cpu among others": {subtreeControl: ptr("io cpu"), weighted: true},
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			if tc.subtreeControl != nil {
				writeFile(t, filepath.Join(root, "cgroup.subtree_control"), *tc.subtreeControl)
			}
			dir := filepath.Join(root, "kube-services")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			not := SetCPUWeight(dir, 25)
			weight, err := os.ReadFile(filepath.Join(dir, "cpu.weight"))
			switch {
			case tc.weighted && (err != nil || string(weight) != "25" || not != ""):
				t.Errorf("cpu.weight %q (%v), why not %q; want 25", weight, err, not)
			case !tc.weighted && !errors.Is(err, fs.ErrNotExist):
				t.Errorf("cpu.weight written (%q, %v) though the cpu controller is not enabled", weight, err)
			case !tc.weighted && (!strings.Contains(not, tc.says) || !strings.Contains(not, root)):
				t.Errorf("why no weight: %q, want it to say %q of %s", not, tc.says, root)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// A kill writes cgroup.kill and waits for cgroup.events to say the cgroup
// is empty, until its timeout; a cgroup that is not there has nothing to
// kill.
func TestKill(t *testing.T) {
	dir := t.TempDir()
	events := filepath.Join(dir, "cgroup.events")
	writeFile(t, events, "populated 1\nfrozen 0\n")
	if err := Kill(dir, 50*time.Millisecond); err == nil || !strings.Contains(err.Error(), "still has processes") {
		t.Errorf("a cgroup that stays populated: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "cgroup.kill")); string(got) != "1" {
		t.Errorf("cgroup.kill holds %q", got)
	}
	writeFile(t, events, "populated 0\nfrozen 0\n")
	if err := Kill(dir, time.Minute); err != nil {
		t.Errorf("an emptied cgroup: %v", err)
	}
	if err := Kill(filepath.Join(dir, "gone"), time.Minute); err != nil {
		t.Errorf("a cgroup that is not there: %v", err)
	}
}

// Populated reads cgroup.events' populated line, and fails naming the
// file when there is none to read.
func TestPopulated(t *testing.T) {
	dir := t.TempDir()
	for events, want := range map[string]bool{
		"populated 1\nfrozen 0\n": true,
		"frozen 0\npopulated 0\n": false,
		"":                        false,
	} {
		writeFile(t, filepath.Join(dir, "cgroup.events"), events)
		if got, err := Populated(dir); err != nil || got != want {
			t.Errorf("cgroup.events %q: populated %v (%v), want %v", events, got, err, want)
		}
	}
	gone := filepath.Join(dir, "gone")
	if _, err := Populated(gone); err == nil || !strings.Contains(err.Error(), gone+"/cgroup.events") {
		t.Errorf("Populated(%s) = %v, want an error naming its cgroup.events", gone, err)
	}
}

// An empty cgroup is removed, one already gone is no error, and one that
// rmdir refuses for good (here: not empty) fails at once, naming it,
// rather than waiting out the timeout meant for EBUSY.
func TestRemove(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "svc")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := Remove(dir, time.Minute); err != nil {
			t.Errorf("Remove(%s): %v", dir, err)
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s is still there: %v", dir, err)
	}
	full := t.TempDir()
	writeFile(t, filepath.Join(full, "cgroup.procs"), "")
	start := time.Now()
	if err := Remove(full, time.Minute); err == nil || !strings.Contains(err.Error(), "removing cgroup "+full) {
		t.Errorf("Remove of a directory that is not empty: %v, want an error naming it", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Remove waited %v for an error that is not EBUSY", d)
	}
}

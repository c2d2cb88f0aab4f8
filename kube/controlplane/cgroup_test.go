package controlplane

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A component's cgroup is made below the parent, which enables for its
// children the accounted controllers it has (which ones, and how: see
// internal/cgroupdir); a parent that offers fewer says which, and one
// that cannot be read says why, while the component still gets its
// directory. (A plain directory stands in for cgroupfs: the files are the
// same names.)
func TestOpenComponentCgroup(t *testing.T) {
	for _, tc := range []struct {
		name, controllers    string // "" controllers: no cgroup.controllers file
		wantEnabled, wantNot string
	}{
		{"all", "cpuset cpu io memory hugetlb pids", "+cpu +memory", ""},
		{"no memory", "cpu pids", "+cpu", `not all of [cpu memory]`},
		{"unreadable", "", "", "reading the controllers of"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := filepath.Join(t.TempDir(), "kube-controlplane")
			if err := os.Mkdir(parent, 0o755); err != nil {
				t.Fatal(err)
			}
			if tc.controllers != "" {
				if err := os.WriteFile(filepath.Join(parent, "cgroup.controllers"), []byte(tc.controllers+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			f, not, err := openComponentCgroup(parent, APIServer)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if f.Name() != filepath.Join(parent, APIServer) {
				t.Errorf("opened %s, want %s", f.Name(), filepath.Join(parent, APIServer))
			}
			if st, err := f.Stat(); err != nil || !st.IsDir() {
				t.Errorf("the component's cgroup is no directory: %v, %v", st, err)
			}
			got, err := os.ReadFile(filepath.Join(parent, "cgroup.subtree_control"))
			if err != nil && tc.wantEnabled != "" {
				t.Fatal(err)
			}
			if string(got) != tc.wantEnabled {
				t.Errorf("enabled %q for the components, want %q", got, tc.wantEnabled)
			}
			if (tc.wantNot == "") != (not == "") || !strings.Contains(not, tc.wantNot) {
				t.Errorf("why not fully accounted: %q, want %q", not, tc.wantNot)
			}
		})
	}
	// A parent that cannot be made (its own parent missing) is an error
	// that names it.
	missing := filepath.Join(t.TempDir(), "no", "such")
	if _, _, err := openComponentCgroup(missing, APIServer); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("openComponentCgroup under a missing directory: %v, want an error naming %s", err, missing)
	}
}

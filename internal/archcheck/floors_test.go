package archcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// pkg is what `go list -json` says of one package that the check needs.
type pkg struct {
	ImportPath string
	Imports    []string
}

// listPackages lists every package of the module with its imports, the
// way the go command sees them (build constraints of this platform).
func listPackages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", Module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("reading go list's output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d packages of %s: not the module's tree", len(pkgs), Module)
	}
	return pkgs
}

// own returns path relative to Module, and whether it is one of Module's
// packages.
func own(path string) (string, bool) {
	if path == Module {
		return ".", true
	}
	return strings.CutPrefix(path, Module+"/")
}

// holds says whether the floor entry folder holds the package rel, and how
// closely (the longer the entry, the closer): "x" holds x and every package
// below it, "x/" only those below it.
func holds(folder, rel string) bool {
	if below, ok := strings.CutSuffix(folder, "/"); ok {
		return strings.HasPrefix(rel, below+"/")
	}
	return rel == folder || strings.HasPrefix(rel, folder+"/")
}

// floorOf returns the index in Floors of the floor that holds rel, or -1.
func floorOf(rel string) int {
	floor, best := -1, 0
	for i, f := range Floors {
		for _, folder := range f.Folders {
			if holds(folder, rel) && len(folder) > best {
				floor, best = i, len(folder)
			}
		}
	}
	return floor
}

// matches says whether rel is named by one of folders (by holds).
func matches(folders []string, rel string) bool {
	return slices.ContainsFunc(folders, func(f string) bool { return holds(f, rel) })
}

// violations returns every import of p's own code that breaks the floors.
// Tests are free to import what they need, above them too: a client's
// tests run the real server, a contract's tests a real backend (real
// parts, not mocks); only Go's ban on cycles binds them.
func violations(p pkg) []string {
	from, _ := own(p.ImportPath)
	fromFloor := floorOf(from)
	if fromFloor < 0 {
		return []string{fmt.Sprintf("%s is on no floor: add its folder to a floor in internal/archcheck/floors.go (and its row to docs/architecture.md)", from)}
	}
	var bad []string
	for _, imp := range p.Imports {
		to, ok := own(imp)
		if !ok {
			continue
		}
		toFloor := floorOf(to)
		switch {
		case toFloor < 0:
			// Reported as its own package's violation.
		case matches(TestKits, to) && !matches(TestKits, from):
			bad = append(bad, fmt.Sprintf("%s imports the test kit %s: only tests and test kits may", from, to))
		case toFloor > fromFloor:
			bad = append(bad, fmt.Sprintf("%s (floor %q) imports %s (floor %q), which is above it", from, Floors[fromFloor].Name, to, Floors[toFloor].Name))
		}
		for _, a := range Forbidden {
			if holds(a.From, from) && holds(a.To, to) && !matches(a.Except, from) {
				bad = append(bad, fmt.Sprintf("%s imports %s, a forbidden arrow: %s", from, to, a.Why))
			}
		}
	}
	return bad
}

// Every import runs down the floors, or stays on its floor; test kits are
// imported by tests alone; no forbidden arrow is drawn.
func TestFloors(t *testing.T) {
	for _, p := range listPackages(t) {
		for _, v := range violations(p) {
			t.Error(v)
		}
	}
}

// The check itself can fail: an upward arrow, a test kit in a package's
// own code, a forbidden arrow and a package on no floor are each reported.
func TestViolationsReported(t *testing.T) {
	for _, c := range []struct {
		p    pkg
		want string
	}{
		{pkg{ImportPath: Module + "/curator", Imports: []string{Module + "/roleserve"}}, "which is above it"},
		{pkg{ImportPath: Module + "/event/memory", Imports: []string{Module + "/curator"}}, "event/memory (floor \"runtime\") imports curator"},
		{pkg{ImportPath: Module + "/consensus", Imports: []string{Module + "/internal/testutil"}}, "the test kit internal/testutil"},
		{pkg{ImportPath: Module + "/kube/kubelet", Imports: []string{Module + "/consensus"}}, "forbidden arrow"},
		{pkg{ImportPath: Module + "/launch", Imports: []string{Module + "/polisctl"}}, "forbidden arrow"},
		{pkg{ImportPath: Module + "/nowhere", Imports: nil}, "is on no floor"},
	} {
		got := strings.Join(violations(c.p), "\n")
		if !strings.Contains(got, c.want) {
			t.Errorf("%s importing %v: got %q, want %q", c.p.ImportPath, c.p.Imports, got, c.want)
		}
	}
	// Down and sideways are allowed, and so is the one exception.
	for _, p := range []pkg{
		{ImportPath: Module + "/roleserve", Imports: []string{Module + "/curator", Module + "/event"}},
		{ImportPath: Module + "/event/etcd", Imports: []string{Module + "/event/memory"}},
		{ImportPath: Module + "/kube/controller", Imports: []string{Module + "/consensus"}},
		{ImportPath: Module + "/launch", Imports: []string{Module + "/ownerdir"}},
	} {
		if v := violations(p); len(v) != 0 {
			t.Errorf("%s: %v", p.ImportPath, v)
		}
	}
}

// Every floor has folders, and no folder is on two floors.
func TestFloorsDeclaredOnce(t *testing.T) {
	seen := map[string]string{}
	for _, f := range Floors {
		if len(f.Folders) == 0 || f.Name == "" || f.Why == "" {
			t.Errorf("floor %q: name, why and folders are all needed", f.Name)
		}
		for _, folder := range f.Folders {
			if other, dup := seen[folder]; dup {
				t.Errorf("%s is on floor %q and on floor %q", folder, other, f.Name)
			}
			seen[folder] = f.Name
		}
	}
}

package systembuild

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// NftPackage is the Debian package nft comes from, installed on the build
// machine with apt-get (scripts/test does); NftProgram is where it puts
// nft. nft is the one program in the tree that Polis does not build: its
// nftables mode makes kube-proxy (through sigs.k8s.io/knftables) run nft
// with rule sets in nft's own language, which no Go library parses.
const (
	NftPackage = "nftables"
	NftProgram = "/usr/sbin/nft"
)

// NftDir holds Debian's nft, the shared libraries it needs and the
// dynamic loader, relative to the tree's root. bin/nft (cmd/polis-nft)
// runs nft from there; nothing else on the node looks into it.
const NftDir = "lib/nft"

// nftLoaderName is the loader's name in NftDir, which cmd/polis-nft runs.
const nftLoaderName = "ld-linux-x86-64.so.2"

// installNft copies NftProgram, every shared library it needs and its
// loader into out/NftDir, each file written only when its bytes changed,
// and removes whatever else is there. The libraries are those the
// program's own loader resolves for it on this machine (ld.so --list, what
// ldd prints), and the copy is checked to be closed: every library that a
// copied file needs is copied too. It returns the files' paths relative to
// out.
func installNft(ctx context.Context, out string, logf func(string, ...any)) ([]string, error) {
	if _, err := os.Stat(NftProgram); err != nil {
		return nil, fmt.Errorf("kube-proxy's nftables mode needs Debian's nft, and %s is missing: install it as root with: apt-get install %s (scripts/test does)", NftProgram, NftPackage)
	}
	interp, err := interpreter(NftProgram)
	if err != nil {
		return nil, err
	}
	listing, err := exec.CommandContext(ctx, interp, "--list", NftProgram).Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list %s (the libraries nft needs): %w", interp, NftProgram, err)
	}
	libs, err := parseLoaderList(listing)
	if err != nil {
		return nil, fmt.Errorf("%s --list %s: %w", interp, NftProgram, err)
	}
	// The tree's names: nft, each library under the name programs ask
	// for (its soname), and the loader under nftLoaderName.
	files := map[string]string{"nft": NftProgram, nftLoaderName: interp}
	for name, path := range libs {
		if name == filepath.Base(interp) || path == interp {
			continue // the loader, listed by its own path
		}
		files[name] = path
	}
	if err := checkClosed(files); err != nil {
		return nil, err
	}
	dir := filepath.Join(out, NftDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var rel []string
	for _, name := range slices.Sorted(maps.Keys(files)) {
		data, err := os.ReadFile(files[name]) // through symlinks: the file itself
		if err != nil {
			return nil, err
		}
		perm := os.FileMode(0o644)
		if name == "nft" || name == nftLoaderName {
			perm = 0o755
		}
		if _, err := writeIfChanged(filepath.Join(dir, name), data, perm); err != nil {
			return nil, err
		}
		rel = append(rel, filepath.Join(NftDir, name))
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if _, ok := files[e.Name()]; !ok {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return nil, err
			}
		}
	}
	logf("installed Debian's nft with %d libraries and its loader into %s", len(files)-2, NftDir)
	return rel, nil
}

// interpreter returns the program interpreter (PT_INTERP) of a dynamic
// executable.
func interpreter(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return "", fmt.Errorf("%s: reading its interpreter: %w", path, err)
			}
			return string(bytes.TrimRight(b, "\x00")), nil
		}
	}
	return "", fmt.Errorf("%s is not dynamically linked: no interpreter", path)
}

// parseLoaderList reads the glibc loader's --list output: for each shared
// object, "NAME => PATH (ADDRESS)", or "PATH (ADDRESS)" for the loader
// itself; the kernel's vDSO has no file. It maps names to paths and fails
// on a library the loader did not find.
func parseLoaderList(out []byte) (map[string]string, error) {
	libs := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if name, rest, ok := strings.Cut(line, " => "); ok {
			path, _, _ := strings.Cut(rest, " (")
			if path == "not found" || !filepath.IsAbs(path) {
				return nil, fmt.Errorf("the loader does not find %s", name)
			}
			libs[name] = path
			continue
		}
		path, _, _ := strings.Cut(line, " (")
		if !filepath.IsAbs(path) {
			continue // linux-vdso.so.1: in the kernel
		}
		libs[filepath.Base(path)] = path
	}
	if len(libs) == 0 {
		return nil, errors.New("no libraries listed")
	}
	return libs, nil
}

// checkClosed fails when a file of files (tree name → path) needs a
// library that files does not hold under that name.
func checkClosed(files map[string]string) error {
	for name, path := range files {
		f, err := elf.Open(path)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		needed, err := f.ImportedLibraries()
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		for _, lib := range needed {
			if _, ok := files[lib]; !ok && lib != filepath.Base(files[nftLoaderName]) {
				return fmt.Errorf("%s (%s) needs %s, which the loader did not list", name, path, lib)
			}
		}
	}
	return nil
}

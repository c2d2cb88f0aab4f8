package image

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// Module is what a kernel module says about itself in its ELF .modinfo
// section: the section is a list of NUL-terminated key=value strings,
// which is where depmod itself reads dependencies from. Debian's kernel
// package ships no modules.dep, so the builder reads the modules directly.
type Module struct {
	// Name is the module's name (name=), with underscores, as the kernel
	// knows it: the file crc32c-intel.ko is the module crc32c_intel.
	Name string
	// Path is the .ko file's path relative to the modules directory.
	Path string
	// Depends are modules whose symbols this one uses (depends=): they
	// must be loaded first or loading fails.
	Depends []string
	// SoftPre are modules or aliases this one asks to have loaded before it
	// (softdep=pre:): loading does not fail without them, but the module
	// may fail later at runtime (ext4 without crc32c cannot mount).
	SoftPre []string
	// Aliases are other names the module answers to (alias=); softdeps
	// often name an alias such as crypto-crc32c rather than a module.
	Aliases []string
}

// ReadModule parses the .modinfo section of the module file at file; rel
// becomes its Path.
func ReadModule(file, rel string) (*Module, error) {
	f, err := elf.Open(file)
	if err != nil {
		return nil, fmt.Errorf("kernel module %s: %w", file, err)
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, fmt.Errorf("kernel module %s: no .modinfo section", file)
	}
	data, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("kernel module %s: reading .modinfo: %w", file, err)
	}
	m, err := parseModinfo(data)
	if err != nil {
		return nil, fmt.Errorf("kernel module %s: %w", file, err)
	}
	if m.Name == "" {
		// Old modules may omit name=; the file name is the fallback the
		// kernel itself uses.
		m.Name = moduleName(strings.TrimSuffix(filepath.Base(file), ".ko"))
	}
	m.Path = rel
	return m, nil
}

// parseModinfo reads the key=value strings of a .modinfo section.
func parseModinfo(data []byte) (*Module, error) {
	m := &Module{}
	for _, field := range bytes.Split(data, []byte{0}) {
		if len(field) == 0 {
			continue // padding between strings
		}
		k, v, ok := strings.Cut(string(field), "=")
		if !ok {
			return nil, fmt.Errorf(".modinfo entry %q is not key=value", field)
		}
		switch k {
		case "name":
			m.Name = moduleName(v)
		case "depends":
			for d := range strings.SplitSeq(v, ",") {
				if d != "" {
					m.Depends = append(m.Depends, moduleName(d))
				}
			}
		case "softdep":
			m.SoftPre = append(m.SoftPre, softdepPre(v)...)
		case "alias":
			m.Aliases = append(m.Aliases, v)
		}
	}
	return m, nil
}

// softdepPre returns the names after "pre:" in a softdep value such as
// "pre: crc32c post: foo".
func softdepPre(v string) []string {
	var out []string
	pre := false
	for w := range strings.FieldsSeq(v) {
		switch w {
		case "pre:":
			pre = true
		case "post:":
			pre = false
		default:
			if pre {
				out = append(out, w)
			}
		}
	}
	return out
}

// moduleName normalises a module name: the kernel treats - and _ alike.
func moduleName(s string) string { return strings.ReplaceAll(s, "-", "_") }

// ModuleIndex is every module of one kernel's modules directory, by name
// and by alias.
type ModuleIndex struct {
	byName  map[string]*Module
	all     []*Module
	builtin map[string]bool
}

// IndexModules reads the .modinfo of every .ko under dir (a kernel's
// lib/modules/<version>), and modules.builtin if present, so that a
// dependency on a module built into the kernel is known to need nothing.
func IndexModules(dir string) (*ModuleIndex, error) {
	ix := &ModuleIndex{byName: map[string]*Module{}, builtin: map[string]bool{}}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(p, ".ko") {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		m, err := ReadModule(p, filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		if prev, dup := ix.byName[m.Name]; dup {
			return fmt.Errorf("kernel modules %s and %s both call themselves %s", prev.Path, m.Path, m.Name)
		}
		ix.byName[m.Name] = m
		ix.all = append(ix.all, m)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("indexing kernel modules in %s: %w", dir, err)
	}
	if len(ix.all) == 0 {
		return nil, fmt.Errorf("indexing kernel modules in %s: no .ko files", dir)
	}
	sort.Slice(ix.all, func(i, j int) bool { return ix.all[i].Name < ix.all[j].Name })
	if b, err := readFileIfExists(filepath.Join(dir, "modules.builtin")); err != nil {
		return nil, err
	} else {
		for line := range strings.SplitSeq(string(b), "\n") {
			if line = strings.TrimSpace(line); line != "" {
				ix.builtin[moduleName(strings.TrimSuffix(path.Base(line), ".ko"))] = true
			}
		}
	}
	return ix, nil
}

// NewModuleIndex makes an index of the given modules (tests build one
// from fixtures; IndexModules reads a kernel's).
func NewModuleIndex(mods []*Module, builtin []string) (*ModuleIndex, error) {
	ix := &ModuleIndex{byName: map[string]*Module{}, builtin: map[string]bool{}}
	for _, m := range mods {
		if _, dup := ix.byName[m.Name]; dup {
			return nil, fmt.Errorf("two modules are called %s", m.Name)
		}
		ix.byName[m.Name] = m
		ix.all = append(ix.all, m)
	}
	sort.Slice(ix.all, func(i, j int) bool { return ix.all[i].Name < ix.all[j].Name })
	for _, b := range builtin {
		ix.builtin[moduleName(b)] = true
	}
	return ix, nil
}

// lookup finds the module a name refers to: a module of that name, else
// the modules with a matching alias (aliases may be glob patterns). Of
// several candidates it prefers a *_generic one, which runs on any CPU
// (the emulated CPU of a TCG guest lacks SSE4.2, so crc32c_intel fails to
// load), then the first by name, so the choice is stable. builtin reports
// a name the kernel already has.
func (ix *ModuleIndex) lookup(name string) (m *Module, builtin bool) {
	if m := ix.byName[moduleName(name)]; m != nil {
		return m, false
	}
	if ix.builtin[moduleName(name)] {
		return nil, true
	}
	var found []*Module
	for _, c := range ix.all {
		for _, a := range c.Aliases {
			if ok, _ := path.Match(a, name); ok || a == name {
				found = append(found, c)
				break
			}
		}
	}
	if len(found) == 0 {
		return nil, false
	}
	for _, c := range found {
		if strings.HasSuffix(c.Name, "_generic") {
			return c, false
		}
	}
	return found[0], false
}

// Resolve returns the wanted modules and everything they need, in an order
// that loads each module after its dependencies (depends=) and after the
// modules its softdep pre: entries name. A wanted module or a dependency
// that does not exist is an error; a softdep that names nothing this
// kernel has is skipped, as modprobe does, since softdeps are optional.
func (ix *ModuleIndex) Resolve(wanted []string) ([]*Module, error) {
	const (
		visiting = 1
		done     = 2
	)
	state := map[string]int{}
	var order []*Module
	var visit func(m *Module, chain []string) error
	visit = func(m *Module, chain []string) error {
		switch state[m.Name] {
		case done:
			return nil
		case visiting:
			return fmt.Errorf("kernel modules depend on each other in a cycle: %s", strings.Join(append(chain, m.Name), " → "))
		}
		state[m.Name] = visiting
		chain = append(chain, m.Name)
		for _, s := range m.SoftPre {
			d, _ := ix.lookup(s)
			if d == nil || state[d.Name] == visiting {
				// Absent or built in; or a soft loop, which the
				// kernel tolerates and so do we.
				continue
			}
			if err := visit(d, chain); err != nil {
				return err
			}
		}
		for _, dep := range m.Depends {
			d, builtin := ix.lookup(dep)
			if builtin {
				continue
			}
			if d == nil {
				return fmt.Errorf("kernel module %s depends on %s, which this kernel does not have", m.Name, dep)
			}
			if err := visit(d, chain); err != nil {
				return err
			}
		}
		state[m.Name] = done
		order = append(order, m)
		return nil
	}
	for _, w := range wanted {
		m, builtin := ix.lookup(w)
		if builtin {
			continue
		}
		if m == nil {
			return nil, fmt.Errorf("kernel module %s: this kernel has no module of that name or alias", w)
		}
		if err := visit(m, nil); err != nil {
			return nil, err
		}
	}
	return order, nil
}

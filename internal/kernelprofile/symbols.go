package kernelprofile

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
)

// KallsymsPath is the kernel's symbol table.
const KallsymsPath = "/proc/kallsyms"

// User names every sample taken in user space.
const User = "[user]"

// symbol is a kernel function's start and name; a module's function's
// name carries the module in brackets ("chacha_permute",
// "encrypt_packet [wireguard]").
type symbol struct {
	addr uint64
	name string
}

// symbols is a kernel's functions sorted by address.
type symbols []symbol

// readSymbols parses a kallsyms table: "ADDRESS TYPE NAME [MODULE]" per
// line, keeping text symbols (t, T, w, W). A table whose addresses are
// all zero, as kallsyms shows them to a reader it does not trust, is an
// error: every sample would be named wrongly.
func readSymbols(r io.Reader) (symbols, error) {
	var syms symbols
	nonzero := false
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 {
			continue
		}
		switch f[1] {
		case "t", "T", "w", "W":
		default:
			continue
		}
		addr, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil {
			return nil, fmt.Errorf("kallsyms line %q: address: %w", sc.Text(), err)
		}
		nonzero = nonzero || addr != 0
		name := f[2]
		if len(f) > 3 {
			name += " " + f[3]
		}
		syms = append(syms, symbol{addr, name})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(syms) > 0 && !nonzero {
		return nil, fmt.Errorf("kallsyms shows no addresses (kptr_restrict, or a reader without CAP_SYSLOG)")
	}
	sort.Slice(syms, func(i, j int) bool { return syms[i].addr < syms[j].addr })
	return syms, nil
}

// loadSymbols reads the running kernel's table.
func loadSymbols() (symbols, error) {
	f, err := os.Open(KallsymsPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readSymbols(f)
}

// kernelSpace is where x86-64's kernel addresses begin (the upper half);
// below it, a sample is in user space.
const kernelSpace = 1 << 63

// name is the function ip falls in: User below kernel space, the nearest
// symbol at or below ip, or the address itself when none is.
func (s symbols) name(ip uint64) string {
	if ip < kernelSpace {
		return User
	}
	i := sort.Search(len(s), func(i int) bool { return s[i].addr > ip }) - 1
	if i < 0 {
		return fmt.Sprintf("%#x", ip)
	}
	return s[i].name
}

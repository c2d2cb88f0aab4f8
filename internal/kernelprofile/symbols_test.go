package kernelprofile

import (
	"strings"
	"testing"
)

const kallsyms = `ffffffff81000000 T _stext
ffffffff81001000 t chacha_permute
ffffffff81001400 D some_data
ffffffff81002000 T csum_partial
ffffffffc0100000 t encrypt_packet	[wireguard]
ffffffffc0100200 t decrypt_packet	[wireguard]
`

func TestSymbols(t *testing.T) {
	syms, err := readSymbols(strings.NewReader(kallsyms))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ip   uint64
		want string
	}{
		{0x401000, User},
		{0xffffffff81000000, "_stext"},
		{0xffffffff81001010, "chacha_permute"},
		// Data symbols are not functions: an address past one is still
		// in the function before it.
		{0xffffffff81001500, "chacha_permute"},
		{0xffffffff81002004, "csum_partial"},
		{0xffffffffc0100210, "decrypt_packet [wireguard]"},
		{0xffffffff80000000, "0xffffffff80000000"},
	} {
		if got := syms.name(tc.ip); got != tc.want {
			t.Errorf("name(%#x) = %q, want %q", tc.ip, got, tc.want)
		}
	}
}

func TestSymbolsErrors(t *testing.T) {
	for _, tc := range []struct{ name, table, want string }{
		{"addresses hidden", "0000000000000000 T _stext\n0000000000000000 t chacha_permute\n", "no addresses"},
		{"a malformed address", "ffffffffzz000000 T _stext\n", "address"},
	} {
		if _, err := readSymbols(strings.NewReader(tc.table)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: readSymbols: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
}

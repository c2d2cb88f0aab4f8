package kernelprofile

import (
	"slices"
	"strings"
	"testing"
)

func TestProfile(t *testing.T) {
	p := &Profile{Samples: 10, Lost: 1, Functions: map[string]int{
		"chacha_permute": 4, User: 3, "poly1305_blocks [poly1305_x86_64]": 2, "csum_partial": 1,
	}}
	if got, want := p.Top(2), []Entry{{"chacha_permute", 4}, {User, 3}}; !slices.Equal(got, want) {
		t.Errorf("Top(2) = %v, want %v", got, want)
	}
	if got := len(p.Top(10)); got != 4 {
		t.Errorf("Top(10) has %d entries, want all 4", got)
	}
	cipher := func(name string) bool {
		return strings.HasPrefix(name, "chacha") || strings.HasPrefix(name, "poly1305")
	}
	if got := p.Share(cipher); got != 0.6 {
		t.Errorf("Share(cipher) = %v, want 0.6", got)
	}
	if got := (&Profile{}).Share(cipher); got != 0 {
		t.Errorf("an empty profile's Share = %v, want 0", got)
	}
	var b strings.Builder
	p.Print(&b, "P ", 2)
	want := "P 10 samples, 1 lost\nP  40.0%      4 chacha_permute\nP  30.0%      3 [user]\n"
	if b.String() != want {
		t.Errorf("Print wrote\n%s\nwant\n%s", b.String(), want)
	}
}

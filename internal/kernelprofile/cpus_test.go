package kernelprofile

import (
	"slices"
	"testing"
)

func TestParseCPUList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
	}{
		{"0", []int{0}},
		{"0-1", []int{0, 1}},
		{"0-3,6,8-9", []int{0, 1, 2, 3, 6, 8, 9}},
	} {
		if got, err := parseCPUList(tc.in); err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("parseCPUList(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "a", "3-1", "0-", "-1", "0,,1"} {
		if got, err := parseCPUList(bad); err == nil {
			t.Errorf("parseCPUList(%q) = %v, want an error", bad, got)
		}
	}
}

package testutil

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFileContains(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	// "straddle" crosses the first 4 MiB read's end.
	data := strings.Repeat("x", 4<<20-3) + "straddle" + strings.Repeat("y", 100) + "end"
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	got := FileContains(t, path, "end", "missing", "straddle")
	if want := []string{"end", "straddle"}; !slices.Equal(got, want) {
		t.Errorf("FileContains = %q, want %q", got, want)
	}
}

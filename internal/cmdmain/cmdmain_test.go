package cmdmain

import (
	"bytes"
	"errors"
	"flag"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A failure is printed with the command's name and exits 1; -h and
// success exit 0 and print nothing more.
func TestReport(t *testing.T) {
	fs := FlagSet("polis-x", &bytes.Buffer{})
	helpErr := fs.Parse([]string{"-h"})
	if !errors.Is(helpErr, flag.ErrHelp) {
		t.Fatalf("-h: Parse returned %v, want flag.ErrHelp", helpErr)
	}
	for _, tc := range []struct {
		err     error
		code    int
		printed string
	}{
		{nil, 0, ""},
		{helpErr, 0, ""},
		{errors.New("no such node"), 1, "polis-x: no such node\n"},
	} {
		var out bytes.Buffer
		if code := Report("polis-x", tc.err, &out); code != tc.code || out.String() != tc.printed {
			t.Errorf("Report(%v) = %d, printed %q; want %d, %q", tc.err, code, out.String(), tc.code, tc.printed)
		}
	}
}

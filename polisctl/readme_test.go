package polisctl

import (
	"io"
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// The README names exactly the commands that take -o json (it once said
// every command did, and 14 did not; issue 26, item 8).
func TestREADMEOutputClaims(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	i := strings.Index(readme, "take `-o json`")
	if i < 0 {
		t.Fatal("the README does not say which commands take -o json")
	}
	claim := readme[max(0, i-300):i]
	var walk func(*cobra.Command)
	walk = func(cmd *cobra.Command) {
		if takesJSON(cmd) {
			name := strings.TrimPrefix(cmd.CommandPath(), "polisctl ")
			if !strings.Contains(claim, "`"+name+"`") {
				t.Errorf("%s takes -o json; the README does not list it", name)
			}
		}
		for _, c := range cmd.Commands() {
			walk(c)
		}
	}
	root := newCLI(func(io.Reader) bool { return false }).root()
	walk(root)
	if strings.Contains(readme, "every command's") {
		t.Error("the README says every command takes -o json")
	}
	for _, name := range strings.Split(claim[strings.LastIndex(claim, "("):], "`") {
		if f := strings.Fields(name); len(f) == 2 && (f[0] == "node" || f[0] == "cluster") {
			c, _, err := root.Find(f)
			if err != nil || !takesJSON(c) {
				t.Errorf("the README lists %s as taking -o json; it does not", name)
			}
		}
	}
}

// takesJSON says whether cmd has -o with json among its formats
// (kubeconfig's --output is a file).
func takesJSON(cmd *cobra.Command) bool {
	f := cmd.Flags().Lookup("output")
	return f != nil && f.Shorthand == "o" && strings.Contains(f.Usage, "json")
}

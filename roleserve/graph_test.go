package roleserve

import (
	"strings"
	"testing"

	"github.com/polis-os/polis/event/memory"
)

func TestGraph(t *testing.T) {
	var g Graph
	membership := &memory.Value[string]{Name: "membership"}
	roles := &memory.Value[int]{Name: "roles"}
	Reads[string](&g, "rolefetch", membership)
	Writes[int](&g, "rolefetch", roles)
	Reads[int](&g, "controlplane", roles)
	if err := g.Check("membership"); err != nil {
		t.Fatalf("Check: %v", err)
	}
	want := "controlplane: reads roles; writes nothing\nrolefetch: reads membership; writes roles\n"
	if got := g.String(); got != want {
		t.Fatalf("String =\n%s\nwant\n%s", got, want)
	}

	// Read but never written; written twice.
	if err := g.Check(); err == nil || !strings.Contains(err.Error(), "rolefetch reads membership, which nothing writes") {
		t.Fatalf("Check without the outside writer: %v", err)
	}
	Writes[int](&g, "impostor", roles)
	if err := g.Check("membership"); err == nil || !strings.Contains(err.Error(), "roles is written by impostor and rolefetch") {
		t.Fatalf("Check with two writers: %v", err)
	}
}

func TestGraphRefusesUnnamedValues(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("an unnamed value was accepted")
		}
	}()
	var g Graph
	Reads[int](&g, "w", &memory.Value[int]{})
}

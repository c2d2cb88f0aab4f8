package roleserve

import (
	"context"
	"strings"
	"testing"

	"github.com/polis-os/polis/consensus"
	"github.com/polis-os/polis/curator"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/event/memory"
)

func TestGraph(t *testing.T) {
	var g Graph
	membership := &memory.Value[string]{Name: "membership"}
	roles := &memory.Value[int]{Name: "roles"}
	rolefetch := g.Worker("rolefetch")
	Reads[string](rolefetch, membership)
	Writes[int](rolefetch, roles)
	Reads[int](g.Worker("controlplane"), roles)
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
	impostor := g.Worker("impostor")
	Writes[int](impostor, roles)
	if err := g.Check("membership"); err == nil || !strings.Contains(err.Error(), "roles is written by impostor and rolefetch") {
		t.Fatalf("Check with two writers: %v", err)
	}

	// Two workers under one name would mix their declarations.
	g.Worker("rolefetch")
	if err := g.Check("membership"); err == nil || !strings.Contains(err.Error(), "two workers are named rolefetch") {
		t.Fatalf("Check with a name given twice: %v", err)
	}
}

func TestGraphRefusesUnnamedValues(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("an unnamed value was accepted")
		}
	}()
	var g Graph
	Reads[int](g.Worker("w"), &memory.Value[int]{})
}

func TestGraphRefusesUnnamedWorkers(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("an unnamed worker was accepted")
		}
	}()
	var g Graph
	g.Worker("")
}

// A worker that waits on a value it did not declare fails: every value a
// worker reacts to is in the graph.
func TestGraphInputsRefuseUndeclared(t *testing.T) {
	var g Graph
	declared := &memory.Value[int]{Name: "declared"}
	hidden := &memory.Value[int]{Name: "hidden"}
	w := g.Worker("w")
	Reads[int](w, declared)
	declared.Set(1)
	hidden.Set(1)

	in := w.Inputs()
	defer in.Close()
	Input(in, event.ValueWatch[int](declared), nil)
	if _, err := in.Wait(context.Background()); err != nil {
		t.Fatalf("Wait on a declared value: %v", err)
	}
	in2 := w.Inputs()
	defer in2.Close()
	Input(in2, event.ValueWatch[int](declared), nil)
	Input(in2, event.ValueWatch[int](hidden), nil)
	if _, err := in2.Wait(context.Background()); err == nil || !strings.Contains(err.Error(), `"hidden"`) {
		t.Fatalf("Wait on an undeclared value = %v, want an error naming it", err)
	}
	// Declared by another worker is not declared by this one.
	Reads[int](g.Worker("other"), hidden)
	in3 := w.Inputs()
	defer in3.Close()
	Input(in3, event.ValueWatch[int](hidden), nil)
	if _, err := in3.Wait(context.Background()); err == nil {
		t.Fatalf("Wait on a value only another worker declared succeeded")
	}
}

// The Graph records each worker's last reaction.
func TestGraphWorkers(t *testing.T) {
	var g Graph
	a := &memory.Value[int]{Name: "a"}
	w := g.Worker("w")
	Reads[int](w, a)
	in := w.Inputs()
	defer in.Close()
	Input(in, event.ValueWatch[int](a), nil)
	a.Set(1)
	if _, err := in.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	a.Set(2)
	if _, err := in.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	ws := g.Workers()
	if len(ws) != 1 || ws[0].Worker != "w" || ws[0].Count != 2 || ws[0].Why != "a v1→v2" || ws[0].At.IsZero() {
		t.Fatalf("Workers = %+v", ws)
	}
}

// Every worker of the role server waits only on what it declared: built
// over real values, the whole role server's Graph holds the values each
// worker's Inputs name (checked by running the workers' first Waits is
// what the unit tests of each worker do; here, that New declares the
// local curator and the services' statuses).
func TestRoleServerGraphDeclaresLocalCurator(t *testing.T) {
	var g Graph
	v := NewValues()
	newWorkerMembership(&g, v, nil)
	newWorkerStatusPush(&g, v, testNode, 7834)
	newWorkerControlPlane(&g, v, ControlPlaneConfig{})
	for _, want := range []struct{ worker, value string }{
		{"membership", "localCurator"},
		{"statuspush", "localCurator"},
		{"controlplane", "localCurator"},
		{"controlplane", curator.StatusName},
		{"controlplane", consensus.StatusName},
	} {
		if !g.declared(want.worker, want.value) {
			t.Errorf("%s does not declare %s", want.worker, want.value)
		}
	}
	newWorkerKubernetes(&g, v, KubernetesConfig{}, testNode.ExternalAddress)
	for _, e := range g.Edges() {
		// The kubernetes worker reads it for the consensus member alone.
		if e.Value == "localControlPlane" && !e.Writes && e.Worker != "kubernetes" {
			t.Errorf("%s reads localControlPlane: readers must use localCurator", e.Worker)
		}
	}
}

package roleserve

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the data-flow tables in doc.go from the Graph (TestDataFlowGolden)")

// The tables in the package doc are drawn from the Graph New builds, so
// that they cannot fall behind a worker's declarations (the hand-drawn
// picture did). When they are stale,
//
//	go test ./roleserve -run TestDataFlowGolden -update
//
// rewrites them.
func TestDataFlowGolden(t *testing.T) {
	rs, err := New(testConfig(t, testCredentials(t), nil), NewValues())
	if err != nil {
		t.Fatal(err)
	}
	want := dataFlow(rs.Graph(), externalValues)
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	start, end, err := generatedLines(doc)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(doc, []byte("\n"))
	got := string(bytes.Join(lines[start:end], nil))
	if got == want {
		return
	}
	if *update {
		fixed := slices.Concat(lines[:start], [][]byte{[]byte(want)}, lines[end:])
		if err := os.WriteFile("doc.go", bytes.Join(fixed, nil), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Log("rewrote the data-flow tables in doc.go")
		return
	}
	t.Errorf("doc.go's data-flow tables differ from the Graph; run go test ./roleserve -run TestDataFlowGolden -update\ndoc.go has:\n%s\nthe Graph gives:\n%s", got, want)
}

// generatedLines finds the tables in doc, as a range of line indexes: the
// first code block (lines "//\t…") after the line that names
// TestDataFlowGolden, up to the prose that follows it.
func generatedLines(doc []byte) (start, end int, err error) {
	lines := strings.SplitAfter(string(doc), "\n")
	marker := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, "TestDataFlowGolden") })
	if marker < 0 {
		return 0, 0, fmt.Errorf("doc.go does not name TestDataFlowGolden before the tables it generates")
	}
	start = marker + 1
	for start < len(lines) && !strings.HasPrefix(lines[start], "//\t") {
		start++
	}
	if start == len(lines) {
		return 0, 0, fmt.Errorf("doc.go has no code block after the line naming TestDataFlowGolden")
	}
	end = start
	for i := start; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(l, "//\t") {
			end = i + 1
		} else if l != "//\n" {
			break
		}
	}
	return start, end, nil
}

// dataFlow renders g as the package doc shows it: every worker with what
// it reads and writes, then every value with its writer and its readers
// (external names the values written outside the role server, and who
// writes them). Each line is a doc comment's code line.
func dataFlow(g *Graph, external map[string]string) string {
	reads, writes := map[string][]string{}, map[string][]string{}
	readers, writers := map[string][]string{}, map[string][]string{}
	for v, who := range external {
		writers[v] = append(writers[v], who)
	}
	for _, e := range g.Edges() {
		if e.Writes {
			writes[e.Worker] = append(writes[e.Worker], e.Value)
			writers[e.Value] = append(writers[e.Value], e.Worker)
		} else {
			reads[e.Worker] = append(reads[e.Worker], e.Value)
			readers[e.Value] = append(readers[e.Value], e.Worker)
		}
	}
	workers := slices.Sorted(slices.Values(g.workerNames()))
	var values []string
	for v := range writers {
		values = append(values, v)
	}
	for v := range readers {
		if _, ok := writers[v]; !ok {
			values = append(values, v)
		}
	}
	slices.Sort(values)

	var workerRows, valueRows [][3]string
	for _, w := range workers {
		workerRows = append(workerRows, [3]string{w, list(reads[w]), list(writes[w])})
	}
	for _, v := range values {
		slices.Sort(readers[v])
		valueRows = append(valueRows, [3]string{v, list(writers[v]), list(readers[v])})
	}
	var b strings.Builder
	table(&b, [3]string{"worker", "reads", "writes"}, workerRows)
	b.WriteString("//\n")
	table(&b, [3]string{"value", "written by", "read by"}, valueRows)
	return b.String()
}

// cellWidth is where a table's list cells wrap, so that a row of the doc
// stays readable at 80 columns or so.
const cellWidth = 36

// table writes rows under head as code lines: the list cells wrapped at
// cellWidth, every column as wide as its widest line.
func table(b *strings.Builder, head [3]string, rows [][3]string) {
	var lines [][3]string
	for _, r := range rows {
		second, third := wrap(r[1]), wrap(r[2])
		for i := range max(len(second), len(third)) {
			var l [3]string
			if i == 0 {
				l[0] = r[0]
			}
			if i < len(second) {
				l[1] = second[i]
			}
			if i < len(third) {
				l[2] = third[i]
			}
			lines = append(lines, l)
		}
	}
	width := [2]int{len(head[0]), len(head[1])}
	for _, l := range lines {
		width = [2]int{max(width[0], len(l[0])), max(width[1], len(l[1]))}
	}
	for _, l := range slices.Concat([][3]string{head}, lines) {
		row := fmt.Sprintf("%-*s  %-*s  %s", width[0], l[0], width[1], l[1], l[2])
		fmt.Fprintf(b, "//\t%s\n", strings.TrimRight(row, " "))
	}
}

// wrap breaks a comma-separated list into lines of at most cellWidth
// (a single longer item keeps a line of its own).
func wrap(s string) []string {
	var out []string
	cur := ""
	for _, word := range strings.SplitAfter(s, ", ") {
		if cur != "" && len(strings.TrimRight(cur+word, " ")) > cellWidth {
			out = append(out, strings.TrimRight(cur, " "))
			cur = ""
		}
		cur += word
	}
	return append(out, strings.TrimRight(cur, " "))
}

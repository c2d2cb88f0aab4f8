package testutil

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"
)

// FileContains returns which of strs the file at path holds, in the order
// given, reading it as a stream: a disk image of gigabytes need not fit in
// memory, and a string that straddles two reads is still found. A file
// that cannot be read to its end fails the test: "not found" must mean
// the bytes were all looked at.
func FileContains(t testing.TB, path string, strs ...string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	keep := 0
	for _, s := range strs {
		keep = max(keep, len(s)-1)
	}
	found := map[string]bool{}
	buf := make([]byte, max(4<<20, 2*keep))
	n := 0 // bytes kept from the previous read
	for {
		m, err := io.ReadFull(f, buf[n:])
		chunk := buf[:n+m]
		for _, s := range strs {
			if bytes.Contains(chunk, []byte(s)) {
				found[s] = true
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			t.Fatalf("reading %s: %v", path, err)
		}
		n = copy(buf, chunk[len(chunk)-keep:])
	}
	var out []string
	for _, s := range strs {
		if found[s] {
			out = append(out, s)
		}
	}
	return out
}

package localstorage

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzDecode feeds Decode what a damaged disk could hold: it must never
// panic, must refuse anything Encode did not write with a CorruptError, and
// must give back exactly what Encode was given. The seed corpus is in
// testdata/fuzz/FuzzDecode; docs/threat-model.md says how to fuzz longer.
func FuzzDecode(f *testing.F) {
	file := File{Path: "/fuzz/file"}
	f.Fuzz(func(t *testing.T, data []byte) {
		content, err := file.Decode(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Decode error %v is not a CorruptError", err)
			}
		} else if !bytes.Equal(file.Encode(content), data) {
			t.Fatalf("Decode accepted %q, which Encode would not have written", data)
		}
		back, err := file.Decode(file.Encode(data))
		if err != nil || !bytes.Equal(back, data) {
			t.Fatalf("Decode(Encode(%q)) = %q, %v", data, back, err)
		}
	})
}

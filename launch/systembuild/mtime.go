package systembuild

import (
	"bytes"
	"debug/elf"
	"os"
	"time"
)

// keepTimesIfUnchanged runs build, then gives back their former
// modification time to the files among paths that build left with the same
// Go build ID: go build does not relink a binary that is up to date, but
// it touches it, and a tree whose files all look new on every build would
// make an image builder that compares times copy everything again.
func keepTimesIfUnchanged(paths []string, build func() error) error {
	type was struct {
		id    []byte
		mtime time.Time
	}
	before := make(map[string]was)
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			continue // not built yet
		}
		if id := goBuildID(p); id != nil {
			before[p] = was{id, st.ModTime()}
		}
	}
	if err := build(); err != nil {
		return err
	}
	for p, w := range before {
		if id := goBuildID(p); bytes.Equal(id, w.id) {
			if err := os.Chtimes(p, time.Time{}, w.mtime); err != nil {
				return err
			}
		}
	}
	return nil
}

// goBuildID returns the content of an executable's Go build ID note (which
// stripping keeps), or nil if it has none or is no ELF file. Go derives
// the ID from the binary's inputs and content: the same ID, the same
// binary.
func goBuildID(p string) []byte {
	f, err := elf.Open(p)
	if err != nil {
		return nil
	}
	defer f.Close()
	s := f.Section(".note.go.buildid")
	if s == nil {
		return nil
	}
	data, err := s.Data()
	if err != nil || len(data) == 0 {
		return nil
	}
	return data
}

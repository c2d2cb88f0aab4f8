package kernelprofile

import (
	"fmt"
	"io"
	"sort"
)

// Profile is what the CPUs were doing while a Sampler ran.
type Profile struct {
	// Samples counts the samples read, over every CPU.
	Samples int
	// Lost counts the samples the kernel dropped because a ring was
	// full (the profile ran longer than the rings hold).
	Lost uint64
	// Functions counts the samples by function name (User for user
	// space).
	Functions map[string]int
}

// Entry is one function's part of a profile.
type Entry struct {
	Name    string
	Samples int
}

// Top is the n functions with the most samples, most first (ties by
// name, so that a profile prints the same way twice).
func (p *Profile) Top(n int) []Entry {
	all := make([]Entry, 0, len(p.Functions))
	for name, c := range p.Functions {
		all = append(all, Entry{name, c})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].Samples != all[j].Samples {
			return all[i].Samples > all[j].Samples
		}
		return all[i].Name < all[j].Name
	})
	if n < len(all) {
		all = all[:n]
	}
	return all
}

// Share is the fraction of the samples in functions that match says
// yes to; 0 for an empty profile.
func (p *Profile) Share(match func(name string) bool) float64 {
	if p.Samples == 0 {
		return 0
	}
	n := 0
	for name, c := range p.Functions {
		if match(name) {
			n += c
		}
	}
	return float64(n) / float64(p.Samples)
}

// Print writes the profile's n busiest functions, one per line with its
// share and count, after a line with the totals; each line starts with
// prefix, so that a console shared with other output can be searched.
func (p *Profile) Print(w io.Writer, prefix string, n int) {
	fmt.Fprintf(w, "%s%d samples, %d lost\n", prefix, p.Samples, p.Lost)
	for _, e := range p.Top(n) {
		fmt.Fprintf(w, "%s%5.1f%% %6d %s\n", prefix, 100*float64(e.Samples)/float64(p.Samples), e.Samples, e.Name)
	}
}

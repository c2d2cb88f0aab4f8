//go:build !linux

package kernelprofile

import "errors"

// Sampler is a profile being taken; only Linux has one.
type Sampler struct{}

// Start fails: kernel profiles are Linux's.
func Start(rate int) (*Sampler, error) {
	return nil, errors.New("kernelprofile: only on Linux")
}

// Stop returns nothing.
func (s *Sampler) Stop() (*Profile, error) {
	return nil, errors.New("kernelprofile: only on Linux")
}

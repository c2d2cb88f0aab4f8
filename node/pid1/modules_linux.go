package pid1

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// loadModules loads every module listed in list, in order. A module the
// kernel already has (EEXIST) is fine, and so is one of OptionalModules
// that finds no hardware for it (ENODEV); any other failure names the
// module, since a missing driver shows up much later as a missing disk or
// NIC.
func loadModules(list string) (int, error) {
	b, err := os.ReadFile(list)
	if err != nil {
		return 0, fmt.Errorf("reading the module list: %w", err)
	}
	n := 0
	for line := range strings.SplitSeq(string(b), "\n") {
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		err := loadModule(line)
		if errors.Is(err, unix.ENODEV) && slices.Contains(OptionalModules, strings.TrimSuffix(filepath.Base(line), ".ko")) {
			continue
		}
		if err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func loadModule(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("loading kernel module: %w", err)
	}
	defer f.Close()
	if err := unix.FinitModule(int(f.Fd()), "", 0); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("loading kernel module %s: %w", path, err) // wraps the errno for ENODEV
	}
	return nil
}

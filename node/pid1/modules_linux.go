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

// LoadModules loads every module listed in list (ModuleListPath), in
// order, each with its ModuleParameters, and returns how many it loaded.
// A module the kernel already has (EEXIST) is fine, and so is one of
// OptionalModules that finds no hardware for it (ENODEV); any other
// failure names the module, since a missing driver shows up much later as
// a missing disk or NIC. Boot calls it; a test binary that runs as a VM's
// init does too, to have the node's kernel as the node has it.
func LoadModules(list string) (int, error) {
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
	params := ModuleParameters[strings.TrimSuffix(filepath.Base(path), ".ko")]
	if err := unix.FinitModule(int(f.Fd()), params, 0); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("loading kernel module %s: %w", path, err) // wraps the errno for ENODEV
	}
	return nil
}

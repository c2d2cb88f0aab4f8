package polisctl

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/polis-os/polis/ownerdir"
)

// DefaultConfigDir is $POLISCTL_CONFIG, else $XDG_CONFIG_HOME/polisctl,
// else ~/.config/polisctl.
func DefaultConfigDir() (string, error) {
	if d := os.Getenv("POLISCTL_CONFIG"); d != "" {
		return d, nil
	}
	if d := os.Getenv("XDG_CONFIG_HOME"); d != "" {
		return filepath.Join(d, "polisctl"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("finding polisctl's configuration directory: %w; set POLISCTL_CONFIG or pass --config", err)
	}
	return filepath.Join(home, ".config", "polisctl"), nil
}

// ownerDir is the configuration directory this run uses, through the
// proxy given to it (--proxy) if any.
func (c *cli) ownerDir() (*ownerdir.Dir, error) {
	d, err := ownerdir.Open(c.configDir)
	if err != nil {
		return nil, err
	}
	d.ProxyURL = c.proxy
	return d, nil
}

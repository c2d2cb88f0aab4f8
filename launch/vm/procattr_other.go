//go:build !linux

package vm

import "os/exec"

// setProcAttr: process groups and Pdeathsig are Linux's.
func setProcAttr(*exec.Cmd) {}

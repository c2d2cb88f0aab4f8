//go:build !linux

package main

// dieWithLauncher: only Linux has a parent-death signal; polis-launch
// stops its nodes itself on every ordinary exit.
func dieWithLauncher() error { return nil }

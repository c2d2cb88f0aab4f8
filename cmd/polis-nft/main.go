// Command polis-nft runs Debian's nft from the node's system disk. It is
// installed there as bin/nft, which is where kube-proxy's nftables mode
// (sigs.k8s.io/knftables) looks for nft on its PATH.
//
// nft is the one dynamically linked program on the system disk: its
// program interpreter is /lib64/ld-linux-x86-64.so.2, and the node's root
// file system has no /lib64. launch/systembuild therefore puts Debian's
// nft, exactly the shared libraries it needs and the dynamic loader into
// lib/nft/ beside bin/ (SystemNftDir), and this program, static like
// everything else there, runs the loader from that directory on nft with
// that directory as its library path. The node's root file system has no
// libraries, no loader and no ld.so.cache (which the loader is told not to
// read), so nft gets exactly the libraries the build resolved for it.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Names in the nft directory, as launch/systembuild writes them.
const (
	nftDir = "../lib/nft" // relative to this program's directory
	loader = "ld-linux-x86-64.so.2"
	nft    = "nft"
)

func main() {
	self, err := os.Executable()
	if err != nil {
		fail(err)
	}
	if self, err = filepath.EvalSymlinks(self); err != nil {
		fail(err)
	}
	dir := filepath.Join(filepath.Dir(self), nftDir)
	// The loader runs nft as if it had been executed itself (--argv0 keeps
	// its name in messages), with its libraries from dir.
	argv := append([]string{loader, "--library-path", dir, "--inhibit-cache", "--argv0", "nft", filepath.Join(dir, nft)}, os.Args[1:]...)
	fail(syscall.Exec(filepath.Join(dir, loader), argv, os.Environ()))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "polis-nft:", err)
	os.Exit(127)
}

// Package debpkg fetches a Debian package and unpacks it into a cache
// directory, for the build steps that take a file from Debian (the node
// image's kernel, launch/image; busybox for mount and umount,
// launch/systembuild). The package is fetched with apt-get download (no
// root needed, only apt's package lists) and unpacked with dpkg-deb -x (no
// root, no maintainer scripts), each only the first time: a stamp file
// marks a finished unpack, so an interrupted one is redone rather than
// trusted, and a .deb already in the cache is used as it is.
package debpkg

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Unpack returns dir/pkg, holding the package pkg unpacked. When no stamp
// says a previous call finished, it fetches pkg into dir (unless one
// pkg_*.deb is there already), unpacks it afresh and calls check, if not
// nil, with the unpacked directory before writing the stamp: an unpack
// check refuses is not trusted the next time either. progress is told
// what takes time.
func Unpack(ctx context.Context, dir, pkg string, progress func(string, ...any), check func(unpacked string) error) (string, error) {
	unpacked := filepath.Join(dir, pkg)
	stamp := unpacked + ".unpacked"
	if _, err := os.Stat(stamp); err == nil {
		return unpacked, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("package cache: %w", err)
	}
	deb, err := findDeb(dir, pkg)
	if err != nil {
		return "", err
	}
	if deb == "" {
		if deb, err = download(ctx, dir, pkg, progress); err != nil {
			return "", err
		}
	}
	progress("unpacking %s", filepath.Base(deb))
	if err := os.RemoveAll(unpacked); err != nil {
		return "", fmt.Errorf("package cache: %w", err)
	}
	if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", deb, unpacked).CombinedOutput(); err != nil {
		return "", fmt.Errorf("dpkg-deb -x %s: %w\n%s", deb, err, strings.TrimSpace(string(out)))
	}
	if check != nil {
		if err := check(unpacked); err != nil {
			return "", err
		}
	}
	if err := os.WriteFile(stamp, nil, 0o644); err != nil {
		return "", fmt.Errorf("package cache: %w", err)
	}
	return unpacked, nil
}

// download fetches pkg into dir with apt-get download and returns the
// .deb's path.
func download(ctx context.Context, dir, pkg string, progress func(string, ...any)) (string, error) {
	progress("fetching %s with apt-get download", pkg)
	out, err := aptDownload(ctx, dir, pkg)
	if err != nil && unknownPackage(out) && os.Geteuid() == 0 {
		// A fresh machine may have no package lists yet, or lists that
		// predate a pinned package; root may refresh them (a user cannot).
		progress("apt does not know %s; updating its package lists (apt-get update)", pkg)
		if uout, uerr := exec.CommandContext(ctx, "apt-get", "update").CombinedOutput(); uerr != nil {
			return "", fmt.Errorf("apt-get update: %w\n%s", uerr, strings.TrimSpace(string(uout)))
		}
		out, err = aptDownload(ctx, dir, pkg)
	}
	if err != nil {
		hint := ""
		if unknownPackage(out) {
			hint = "\napt does not know the package: its lists may be missing or old (run apt-get update as root)"
		}
		return "", fmt.Errorf("apt-get download %s: %w\n%s%s", pkg, err, strings.TrimSpace(string(out)), hint)
	}
	deb, err := findDeb(dir, pkg)
	if err != nil {
		return "", err
	}
	if deb == "" {
		return "", fmt.Errorf("apt-get download %s left no %s_*.deb in %s", pkg, pkg, dir)
	}
	return deb, nil
}

func aptDownload(ctx context.Context, dir, pkg string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "apt-get", "download", pkg)
	cmd.Dir = dir
	return cmd.CombinedOutput()
}

// unknownPackage recognises apt's answer for a package it has no record of.
func unknownPackage(out []byte) bool {
	return bytes.Contains(out, []byte("Couldn't find")) || bytes.Contains(out, []byte("Unable to locate"))
}

// findDeb returns the downloaded .deb of pkg in dir, or "" if there is none.
func findDeb(dir, pkg string) (string, error) {
	m, err := filepath.Glob(filepath.Join(dir, pkg+"_*.deb"))
	if err != nil {
		return "", err
	}
	switch len(m) {
	case 0:
		return "", nil
	case 1:
		return m[0], nil
	}
	return "", fmt.Errorf("package cache %s holds several %s packages (%s); remove all but one", dir, pkg, strings.Join(m, ", "))
}

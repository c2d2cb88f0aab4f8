package systembuild

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// BusyboxPackage is the Debian package that mount and umount come from:
// busybox, statically linked, which runs the applet its file is named
// after. kubelet executes mount and umount (tmpfs-backed volumes such as
// Secrets and projected service account tokens), and the node has no
// util-linux.
const BusyboxPackage = "busybox-static"

// busyboxPath is the binary's path in the package.
const busyboxPath = "bin/busybox"

// fetchBusybox returns busybox from BusyboxPackage unpacked under dir,
// fetching the package with apt-get download (no root needed, only apt's
// package lists) and unpacking it with dpkg-deb -x (no root, no maintainer
// scripts) the first time. A stamp file marks a finished unpack, so an
// interrupted one is redone rather than trusted.
func fetchBusybox(ctx context.Context, dir string, logf func(string, ...any)) (string, error) {
	unpacked := filepath.Join(dir, BusyboxPackage)
	bin := filepath.Join(unpacked, busyboxPath)
	stamp := unpacked + ".unpacked"
	if _, err := os.Stat(stamp); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	deb, err := findDeb(dir, BusyboxPackage)
	if err != nil {
		return "", err
	}
	if deb == "" {
		logf("fetching %s with apt-get download", BusyboxPackage)
		out, err := aptDownload(ctx, dir, BusyboxPackage)
		if err != nil && unknownPackage(out) && os.Geteuid() == 0 {
			// A fresh machine may have no package lists yet; root may
			// fetch them (a user cannot).
			logf("apt does not know %s; updating its package lists (apt-get update)", BusyboxPackage)
			if uout, uerr := exec.CommandContext(ctx, "apt-get", "update").CombinedOutput(); uerr != nil {
				return "", fmt.Errorf("apt-get update: %w\n%s", uerr, strings.TrimSpace(string(uout)))
			}
			out, err = aptDownload(ctx, dir, BusyboxPackage)
		}
		if err != nil {
			hint := ""
			if unknownPackage(out) {
				hint = "\napt does not know the package: its lists may be missing or old (run apt-get update as root)"
			}
			return "", fmt.Errorf("apt-get download %s: %w\n%s%s", BusyboxPackage, err, strings.TrimSpace(string(out)), hint)
		}
		if deb, err = findDeb(dir, BusyboxPackage); err != nil {
			return "", err
		}
		if deb == "" {
			return "", fmt.Errorf("apt-get download %s left no %s_*.deb in %s", BusyboxPackage, BusyboxPackage, dir)
		}
	}
	logf("unpacking %s", filepath.Base(deb))
	if err := os.RemoveAll(unpacked); err != nil {
		return "", err
	}
	if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", deb, unpacked).CombinedOutput(); err != nil {
		return "", fmt.Errorf("dpkg-deb -x %s: %w\n%s", deb, err, strings.TrimSpace(string(out)))
	}
	if err := checkStatic(bin); err != nil {
		return "", fmt.Errorf("the package %s: %w", BusyboxPackage, err)
	}
	if err := os.WriteFile(stamp, nil, 0o644); err != nil {
		return "", err
	}
	return bin, nil
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
	return "", fmt.Errorf("%s holds several %s packages (%s); remove all but one", dir, pkg, strings.Join(m, ", "))
}

package image

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/polis-os/polis/node/pid1"
)

// DefaultModules are the modules a node needs in a qemu VM, by what they
// are for; Build adds everything they depend on. The virtio PCI transport
// is named because nothing depends on it (virtio_net and virtio_blk only
// need the virtio core), yet without it there is no NIC and no disk.
var DefaultModules = []string{
	"qemu_fw_cfg",                    // node parameters from the firmware
	"virtio_pci",                     // the bus the NIC and the disks sit on
	"virtio_net",                     // the cluster NIC
	"virtio_blk",                     // the ESP and data disks
	"ext4",                           // the data disk
	"vfat", "nls_cp437", "nls_ascii", // the ESP and the code pages it is mounted with
	"button", "evdev", // the ACPI power button: a clean power-off on request
	"i6300esb", // the hardware watchdog PID 1 arms (with the watchdog core it needs)
	"squashfs", // the read-only system disk (pid1.SystemRoot)
	// The encrypted data disk: dm-crypt over the device-mapper, with
	// aes-xts-plain64 (xts over ecb(aes); AES itself is built in, and
	// aesni_intel is its fast form on a CPU with AES-NI: optional, as
	// pid1.OptionalModules says, since on one without it its init fails).
	"dm_mod", "dm_crypt", "xts", "ecb", "aesni_intel",
	// Containers and their traffic: overlayfs for image layers; a bridge
	// and veth pairs for pod networks, with bridged traffic passing
	// netfilter (br_netfilter); conntrack and NAT, and the nftables
	// expressions Services and port mappings are written with (kube-proxy's
	// nftables mode: ct, nat, masquerade, redirect, reject (in its ip and
	// ip6 tables too), fib, numgen, limit; conntrack entries are cleared
	// over netlink).
	"overlay",
	"bridge", "br_netfilter", "veth",
	"nf_conntrack", "nf_nat", "nf_conntrack_netlink",
	"nf_tables", "nft_chain_nat", "nft_ct", "nft_nat", "nft_masq", "nft_redir",
	"nft_reject_inet", "nft_reject_ipv4", "nft_reject_ipv6", "nft_fib_inet", "nft_numgen", "nft_limit",
	// Pod traffic between nodes, encrypted (clusternet): WireGuard, with
	// the UDP tunnel and crypto libraries it depends on.
	"wireguard",
}

// nodePackage is the node agent's main package.
const nodePackage = "github.com/polis-os/polis/cmd/polis-node"

// formatVersion changes when the initramfs layout changes, so that a
// cached initramfs of an older layout is rebuilt.
const formatVersion = "polis-initramfs-2"

// Config says what to build and where.
type Config struct {
	// CacheDir keeps the kernel package and the agent between builds.
	// Default: the user's cache directory + polis/image.
	CacheDir string
	// OutDir receives the kernel and the initramfs. Default: CacheDir/out.
	OutDir string
	// Agent is a prebuilt static polis-node. Default: built from SourceDir
	// with CGO_ENABLED=0 (go build's cache makes an unchanged rebuild quick).
	Agent string
	// SourceDir is a directory inside the Polis module, where go build
	// runs. Default: the working directory.
	SourceDir string
	// Modules are the wanted modules; default DefaultModules.
	Modules []string
	// SystemDir is a directory laid out like the node's /system
	// (pid1.SystemRoot and the System* paths below it: the runtime's
	// binaries, the CNI plugins, the images a node loads itself), from
	// which Build writes the read-only system disk. Empty: no system disk,
	// and the machines boot as before it existed (PID 1 mounts one only
	// when the machine has it).
	SystemDir string
	// KernelDeb is the kernel package's .deb, already fetched (the Bazel
	// build's pinned download, named as Debian names it:
	// KernelPackage_VERSION_amd64.deb). Default: apt-get download into
	// CacheDir, once.
	KernelDeb string
	// Progress receives a line per step; nil discards them.
	Progress io.Writer
}

// Image is a built node image.
type Image struct {
	// Kernel is the bootable kernel, Initramfs the gzip'd newc archive with
	// the agent as /init.
	Kernel, Initramfs string
	// Release is the kernel's release.
	Release string
	// Modules are the modules in the initramfs, in load order.
	Modules []string
	// System is the read-only system disk (a squashfs image), "" when
	// Config.SystemDir was empty. Every machine of a launch may attach
	// the same file (launch/vm opens it read-only).
	System string
	// SystemID is the system disk's ID (the hash of its inputs, also on
	// the disk at pid1.SystemIDPath), "" without one.
	SystemID string
	// Reused is true when nothing changed and the cached initramfs (and
	// system disk, if any) was kept.
	Reused bool
}

// Build makes the node image: it fetches and unpacks the kernel package
// (once), builds the agent, resolves the modules' load order from their
// .modinfo, and writes the initramfs, unless the one in OutDir was made
// from exactly the same inputs.
func Build(ctx context.Context, cfg Config) (*Image, error) {
	start := time.Now()
	progress := func(format string, args ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "image: "+format+"\n", args...)
		}
	}
	if cfg.CacheDir == "" {
		d, err := os.UserCacheDir()
		if err != nil {
			return nil, fmt.Errorf("image: no cache directory given and none found: %w", err)
		}
		cfg.CacheDir = filepath.Join(d, "polis", "image")
	}
	if cfg.OutDir == "" {
		cfg.OutDir = filepath.Join(cfg.CacheDir, "out")
	}
	if cfg.Modules == nil {
		cfg.Modules = DefaultModules
	}
	if err := os.MkdirAll(cfg.OutDir, 0o755); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	unlock, err := lockCache(cfg.CacheDir, progress)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	defer unlock()

	kernelDir := filepath.Join(cfg.CacheDir, "kernel")
	if cfg.KernelDeb != "" {
		if err := placeKernelDeb(cfg.KernelDeb, kernelDir); err != nil {
			return nil, fmt.Errorf("image: %w", err)
		}
	}
	k, err := fetchKernel(ctx, KernelPackage, kernelDir, progress)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	progress("kernel %s", k.Release)

	agent := cfg.Agent
	if agent == "" {
		agent = filepath.Join(cfg.CacheDir, "polis-node")
		progress("building the node agent (static, CGO_ENABLED=0)")
		t := time.Now()
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", agent, nodePackage)
		cmd.Dir = cfg.SourceDir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("image: building the node agent: %w\n%s\nRun from inside the Polis repository, or give a prebuilt agent", err, strings.TrimSpace(string(out)))
		}
		progress("built the node agent in %v", time.Since(t).Round(10*time.Millisecond))
	}
	agentBytes, err := os.ReadFile(agent)
	if err != nil {
		return nil, fmt.Errorf("image: reading the node agent: %w", err)
	}
	if err := checkStatic(agent); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}

	t := time.Now()
	ix, err := IndexModules(k.ModulesDir)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	mods, err := ix.Resolve(cfg.Modules)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	img := &Image{
		Kernel:    filepath.Join(cfg.OutDir, "vmlinuz"),
		Initramfs: filepath.Join(cfg.OutDir, "initramfs.cpio.gz"),
		Release:   k.Release,
	}
	for _, m := range mods {
		img.Modules = append(img.Modules, m.Name)
	}
	progress("%d kernel modules resolved from .modinfo in %v: %s", len(mods), time.Since(t).Round(10*time.Millisecond), strings.Join(img.Modules, " "))

	// The key names every input; the modules come from an unpacked
	// package of a fixed version, so their paths stand for their content.
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", formatVersion, k.Release)
	for _, m := range mods {
		fmt.Fprintf(h, "%s\n", m.Path)
	}
	h.Write(agentBytes)
	key := hex.EncodeToString(h.Sum(nil))

	systemReused := true
	if cfg.SystemDir != "" {
		if systemReused, err = systemDisk(cfg.SystemDir, img, cfg.OutDir, progress); err != nil {
			return nil, fmt.Errorf("image: %w", err)
		}
	}

	keyFile := img.Initramfs + ".key"
	if old, err := os.ReadFile(keyFile); err == nil && string(old) == key {
		if _, err := os.Stat(img.Initramfs); err == nil {
			if _, err := os.Stat(img.Kernel); err == nil {
				img.Reused = systemReused
				progress("nothing changed in the initramfs: %s is current (%v)", img.Initramfs, time.Since(start).Round(10*time.Millisecond))
				return img, nil
			}
		}
	}

	progress("writing the initramfs")
	t = time.Now()
	if err := writeInitramfs(img.Initramfs, agentBytes, k.ModulesDir, mods); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	if err := copyFile(k.Image, img.Kernel); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	if err := os.WriteFile(keyFile, []byte(key), 0o644); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	st, _ := os.Stat(img.Initramfs)
	progress("wrote %s (%.1f MB) in %v; image built in %v", img.Initramfs, float64(st.Size())/1e6, time.Since(t).Round(10*time.Millisecond), time.Since(start).Round(10*time.Millisecond))
	return img, nil
}

// systemDisk makes img's system disk from the tree dir in outDir, unless
// the one there was made from exactly the same tree; it reports whether
// it was reused.
func systemDisk(dir string, img *Image, outDir string, progress func(string, ...any)) (bool, error) {
	t := time.Now()
	key, size, err := hashSystemTree(dir)
	if err != nil {
		return false, err
	}
	img.System = filepath.Join(outDir, "system.squashfs")
	img.SystemID = key
	keyFile := img.System + ".key"
	if old, err := os.ReadFile(keyFile); err == nil && string(old) == key {
		if _, err := os.Stat(img.System); err == nil {
			progress("the system disk %s is current (%s, %.1f MB of files hashed in %v)", img.System, key[:12], float64(size)/1e6, time.Since(t).Round(10*time.Millisecond))
			return true, nil
		}
	}
	progress("writing the system disk from %s (%.1f MB of files)", dir, float64(size)/1e6)
	// The old key goes first: a crash after the new disk replaced the old
	// one must not leave the old key naming it.
	if err := os.Remove(keyFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	if err := buildSystemDisk(dir, img.System, key); err != nil {
		return false, err
	}
	if err := os.WriteFile(keyFile, []byte(key), 0o644); err != nil {
		return false, err
	}
	st, err := os.Stat(img.System)
	if err != nil {
		return false, err
	}
	progress("wrote the system disk %s (%s, %.1f MB) in %v", img.System, key[:12], float64(st.Size())/1e6, time.Since(t).Round(10*time.Millisecond))
	return false, nil
}

// lockCache takes an exclusive lock on the cache directory, so that two
// builds at once (go test runs the VM test packages in parallel) do not
// download, unpack or write into the same files together.
func lockCache(dir string, progress func(string, ...any)) (func(), error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("locking the cache: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		progress("waiting for another build using %s", dir)
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
			f.Close()
			return nil, fmt.Errorf("locking the cache: %w", err)
		}
	}
	return func() { f.Close() }, nil // closing releases the lock
}

// checkStatic refuses a dynamically linked agent: as /init it would fail
// in the guest with nothing but a kernel panic to show for it.
func checkStatic(p string) error {
	f, err := elf.Open(p)
	if err != nil {
		return fmt.Errorf("the node agent %s: %w", p, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return fmt.Errorf("the node agent %s is dynamically linked; build it with CGO_ENABLED=0", p)
		}
	}
	return nil
}

// writeInitramfs writes the archive to a temporary file and renames it
// over out, so an interrupted build never leaves a truncated initramfs
// that looks current.
func writeInitramfs(out string, agent []byte, modulesDir string, mods []*Module) error {
	var buf bytes.Buffer
	cw := NewNewcWriter(&buf)
	if err := cw.WriteFile(strings.TrimPrefix(pid1.InitPath, "/"), 0o755, agent); err != nil {
		return err
	}
	for _, d := range []string{"dev", "proc", "sys", "tmp", "run"} {
		if err := cw.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	// /dev/console (5, 1): the kernel gives it to init as stdin, stdout
	// and stderr, before anything is mounted.
	if err := cw.CharDevice("dev/console", 0o600, 5, 1); err != nil {
		return err
	}
	var list strings.Builder
	for _, m := range mods {
		b, err := os.ReadFile(filepath.Join(modulesDir, filepath.FromSlash(m.Path)))
		if err != nil {
			return fmt.Errorf("kernel module %s: %w", m.Name, err)
		}
		dst := pid1.ModulesDir + "/" + m.Name + ".ko"
		if err := cw.WriteFile(strings.TrimPrefix(dst, "/"), 0o644, b); err != nil {
			return err
		}
		list.WriteString(dst + "\n")
	}
	if err := cw.WriteFile(strings.TrimPrefix(pid1.ModuleListPath, "/"), 0o644, []byte(list.String())); err != nil {
		return err
	}
	if err := cw.Close(); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), ".initramfs-*")
	if err != nil {
		return fmt.Errorf("writing the initramfs: %w", err)
	}
	defer os.Remove(tmp.Name())
	zw := gzip.NewWriter(tmp)
	if _, err := zw.Write(buf.Bytes()); err != nil {
		tmp.Close()
		return fmt.Errorf("writing the initramfs: %w", err)
	}
	if err := zw.Close(); err != nil {
		tmp.Close()
		return fmt.Errorf("writing the initramfs: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing the initramfs: %w", err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("writing the initramfs: %w", err)
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return fmt.Errorf("writing the initramfs: %w", err)
	}
	return nil
}

// copyFile copies src to dst through a temporary file.
func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("copying %s: %w", src, err)
	}
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("copying %s: %w", src, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("copying %s: %w", src, err)
	}
	return nil
}

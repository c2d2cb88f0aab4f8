// Package image builds the Polis node image: Debian's packaged kernel and
// an initramfs whose /init is the node agent, for qemu to boot with
// -kernel and -initrd, and the read-only system disk beside them.
//
// # The model
//
// An image is four inputs and three outputs. The inputs are the kernel
// package (KernelPackage, the one place its version is named), the static
// node agent (CGO_ENABLED=0, so /init needs no loader or libc), the list
// of wanted kernel modules (DefaultModules), and the system tree
// (Config.SystemDir: a host directory laid out like the node's /system,
// see pid1.SystemRoot). The outputs are the kernel (vmlinuz), the
// initramfs (a gzip'd newc archive, written by NewcWriter: no cpio binary
// involved), and the system disk (system.squashfs).
//
// The initramfs holds what a machine needs to boot: every boot unpacks it
// into RAM. The large programs a node runs besides the agent (the
// Kubernetes bundle, the container runtime, the CNI plugins, the images
// it loads itself) go on the system disk instead: a squashfs written by
// go-diskfs (gzip: see buildSystemDisk for why not zstd; read-only by construction, every file owned by root
// with its permissions kept, padded to whole sectors), which the VMs of
// a launch all attach read-only and PID 1 mounts at /system, reading
// only the pages it uses. The builder adds the disk's ID (the hash of
// its inputs) at pid1.SystemIDPath, which PID 1 prints. The tree may hold
// directories and regular files only (go-diskfs' writer cannot write
// symlinks; devices have no place there). An empty SystemDir means no
// system disk: machines boot without one, as before it existed.
//
// The kernel package is fetched with apt-get download and unpacked with
// dpkg-deb -x, both without root. It ships no modules.dep, so the load
// order is not taken from depmod or from a hand-kept list: each module's
// ELF .modinfo says what it needs (depends=, softdep=pre:) and what else
// it is called (alias=), and ModuleIndex.Resolve orders the wanted modules
// after everything they need. The initramfs carries those modules and a
// list of them in load order (pid1.ModuleListPath), which the agent, as
// PID 1, loads one by one (node/pid1).
//
// # Caching
//
// The unpacked kernel stays in the cache directory; go build's own cache
// makes an unchanged agent quick to "rebuild"; and the initramfs and the
// system disk are only rewritten when the hash of their inputs changed
// (the system tree's: every path, mode and file content, read in full;
// contents, not modification times, so a rebuilt tree with the same bytes
// keeps its disk). A rebuild with nothing changed takes seconds, most of
// them reading the modules' .modinfo and hashing the system tree.
//
// # What it does not do
//
// It builds no writable disk: a node formats its blank ESP and data disks
// itself on first boot (node/pid1), so the launcher only creates empty
// files. It does not
// sign anything, and it boots only where qemu gives the kernel directly
// (no bootloader).
package image

// Package image builds the Polis node image: Debian's packaged kernel and
// an initramfs whose /init is the node agent, for qemu to boot with
// -kernel and -initrd.
//
// # The model
//
// An image is three inputs and two outputs. The inputs are the kernel
// package (KernelPackage, the one place its version is named), the static
// node agent (CGO_ENABLED=0, so /init needs no loader or libc), and the
// list of wanted kernel modules (DefaultModules). The outputs are the
// kernel (vmlinuz) and the initramfs (a gzip'd newc archive, written by
// NewcWriter: no cpio binary involved).
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
// makes an unchanged agent quick to "rebuild"; and the initramfs is only
// rewritten when the hash of its inputs changed. A rebuild with nothing
// changed takes seconds, most of them reading the modules' .modinfo.
//
// # What it does not do
//
// It builds no disk images: a node formats its blank disks itself on first
// boot (node/pid1), so the launcher only creates empty files. It does not
// sign anything, and it boots only where qemu gives the kernel directly
// (no bootloader).
package image

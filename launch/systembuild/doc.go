// Package systembuild builds the node's system tree: the directory that the
// image builder (launch/image) writes to the read-only system disk, and
// that PID 1 mounts at pid1.SystemRoot. It holds what a Kubernetes worker
// runs besides the agent, laid out as the pid1.System* paths say:
//
//	bin/polis-kube                 the Kubernetes bundle (kube/bundle), with kubelet and kube-proxy
//	bin/containerd                 containerd v2 (ContainerdVersion)
//	bin/containerd-shim-runc-v2    its runc shim
//	bin/ctr                        containerd's client, to load images and debug
//	bin/runc                       runc (RuncVersion), static, with seccomp
//	bin/polis-coredns              the node's DNS server: CoreDNS (CoreDNSVersion) with the node's plugins
//	bin/nft                        cmd/polis-nft: runs Debian's nft from lib/nft
//	lib/nft/                       Debian's nft, the shared libraries it needs, the dynamic loader
//	bin/mount, bin/umount          Debian's busybox-static, which kubelet executes
//	cni/bin/bridge, host-local, loopback, portmap   the CNI plugins (CNIPluginsVersion)
//	images/pause.tar               the pod sandbox image PauseImage, an OCI archive
//
// # Where each part comes from
//
// Everything but mount and nft is built from pinned Go modules, nothing
// prebuilt. containerd, runc, the CNI plugins and CoreDNS are pinned in the
// noderuntime/ Go module, a module of its own (as kubernetes/ is for the
// bundle) so that the main module neither compiles them nor shares their
// dependency versions; its go.mod names their main packages as tools (and
// holds polis-coredns, CoreDNS' plugins the node needs behind a main of
// our own), and this package go-builds those packages there. The pause image's process is
// Polis' own cmd/polis-pause. mount and umount are copies of busybox from
// Debian's busybox-static package (apt-get download, dpkg-deb -x, no root
// needed), a static multi-call binary that picks the applet by its name.
//
// nft is the one dynamically linked program, and the one binary that is
// Debian's own build: kube-proxy's nftables mode (sigs.k8s.io/knftables)
// runs nft with rule sets in nft's language, which no Go library parses.
// It comes from Debian's nftables package installed on the build machine
// (apt-get install nftables; scripts/test does). The build asks nft's own
// loader which shared libraries it resolves for it (ld.so --list, what ldd
// prints), copies exactly those and the loader into lib/nft, and checks
// the copy is closed (every library a copied file needs is there). The
// node's root has no /lib64, so bin/nft, static, runs the copied loader
// on the copied nft with lib/nft as its only library path.
//
// Every binary is static and stripped, built with -trimpath. All but runc
// build with CGO_ENABLED=0. runc needs cgo (its nsenter part runs as C
// before the Go runtime starts) and links statically against glibc and
// libseccomp: Debian's gcc, libc6-dev, libseccomp-dev and pkg-config must
// be installed (scripts/test installs them as root). It is built with the
// seccomp tag, so that Pods asking for the RuntimeDefault seccomp profile
// (which the restricted Pod Security level requires) can run; without
// libpathrs (a Rust library), so runc uses its pure-Go path resolution.
// containerd's shim runs as a binary of its own, not as a subcommand of a
// multi-call binary: it starts copies of itself through os.Executable.
//
// # Caching
//
// A second build with nothing changed takes seconds: Go's build cache
// compiles nothing, and go build does not even relink a binary whose
// output file is already the one it would write (it only touches it; the
// build gives an unchanged binary, by its Go build ID, its old time back).
// busybox's package stays unpacked in the cache directory. The pause
// archive, the busybox copies and nft's files are written only when their
// bytes changed. So an unchanged tree keeps every file's time, and an image
// builder that compares them sees nothing new.
// The first build is long: the Kubernetes bundle alone compiles about two
// thousand packages (a quarter of an hour or more on two cores), and
// containerd, runc, the plugins and CoreDNS (about 11 minutes alone on a
// loaded machine) add more.
package systembuild

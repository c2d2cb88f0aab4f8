// Package pid1 is what the node agent does when it is a machine's init:
// the duties of PID 1 inside the node image (launch/image builds it).
//
// # The model
//
// The kernel runs the agent as /init from the initramfs, with nothing
// mounted, no modules loaded and no network. Boot turns that into a
// Machine the agent can run on, prepared for a container runtime and a
// kubelet, in a fixed order where each step needs the one before:
//
//  0. leave rootfs: the initramfs' root is rootfs, a mount with no
//     parent, from which pivot_root(2) fails (EINVAL), and runc
//     pivot_roots into every container. So, as switch_root does, PID 1
//     mounts a tmpfs, moves the initramfs' files into it (each copied,
//     then removed, freeing the RAM it held), moves the tmpfs onto /,
//     chroots into it and executes /init again: still PID 1, now on a
//     root that pivot_root accepts. Everything below runs on that root;
//  1. mount proc, sys, dev (devtmpfs), dev/pts, dev/shm, run and tmp (both
//     tmpfs), and cgroup2 at CgroupRoot; then make every mount shared,
//     recursively, as kubelet requires for mount propagation; write
//     /etc/hosts (localhost), /etc/passwd, /etc/group and a machine ID,
//     which the resolver and kubelet read (etc_linux.go);
//  2. load the kernel modules listed at ModuleListPath, in that order (the
//     image builder resolved it from the modules' .modinfo): the drivers
//     of the machine, squashfs for the system disk, and what containers
//     and pod traffic need (overlay, bridge, br_netfilter, veth,
//     conntrack, NAT, nftables); then arm the hardware watchdog, if the
//     machine has one (internal/watchdog; under qemu an i6300esb), which
//     PID 1 feeds from then on and never disarms: a machine that stops
//     feeding it (its kernel wedged, PID 1 no longer scheduled) is reset
//     WatchdogTimeout later, and a halt that has not ended
//     WatchdogHaltTimeout after it began is reset too;
//  3. set the kernel settings a node running containers needs (sysctls:
//     forwarding, bridged traffic through netfilter, inotify limits, and
//     what kubelet expects: overcommit, panic on oops, reboot 10 s after a
//     panic);
//  4. build the cgroup tree: PID 1 moves itself into the leaf
//     CgroupAgentDir, then enables cpu, cpuset, io, memory, pids (and
//     hugetlb) for the children of the root and of CgroupNodeDir. What
//     the agent runs for Kubernetes gets children of the root, with the
//     controllers enabled here, which the kube packages make: on a
//     controller kube-controlplane/ (the apiserver, controller-manager
//     and scheduler: kube/controlplane), on a worker kubernetes/
//     (containerd, the kubelet and the pods: kube/kubelet) and
//     kube-services/ (kube-proxy and the DNS server, given a low
//     cpu.weight: kube/nodeservice);
//  5. read the machine's settings from the kernel command line
//     (polis.address=IP/PREFIX, and the agent's flags of AgentFlags, such
//     as polis.lease-ttl=5s; AgentFlags says why there), set the host
//     name from the address (Hostname), and leave the node
//     parameters to fw_cfg (node.FWCfgParametersPath, present once
//     qemu_fw_cfg is loaded);
//  6. bring up lo and the cluster NIC with netlink;
//  7. wait until every virtio disk on the PCI bus has been probed, and
//     tell them apart by their serial numbers: the ESP and data disks
//     (SerialESP, SerialData) are formatted if blank and mounted under
//     StorageRoot, where localstorage expects them: esp/ (FAT32), data/,
//     and a tmpfs for ephemeral/. The data disk is encrypted
//     (datadisk_linux.go): a node/diskseal header at its start, the rest
//     mapped through dm-crypt (internal/devmapper, aes-xts-plain64) as
//     DataMapping and formatted as ext4 inside the mapping (its journal
//     not zeroed: lazyjournal.go), the key wrapped under a local part
//     sealed by the machine's TPM (TPMDevice), or in software on a
//     machine without one (Machine.DataSealing); a disk with a header
//     is unlocked, never formatted once ready, and a damaged header
//     stops the boot with the disk untouched. A disk bound to its
//     cluster also needs its cluster part: PID 1 asks the curators
//     (BootOptions.ClusterPart, the agent's code, from what the ESP
//     holds) until one hands it, and says on the console while none
//     answers or the cluster refuses the node; the power button works
//     meanwhile (its watcher starts before the disks). The agent binds
//     and unbinds the disk later (Machine.DataDisk). A plain ext4 data
//     disk from before sealing is mounted as it is (DataSealingNone).
//     The agent seals its configuration with the same TPM
//     (Machine.Sealer). A
//     rebooted machine finds its sealed configuration on the ESP and
//     rejoins, as a restarted process does;
//  8. mount the system disk (SerialSystem, a squashfs the image builder
//     wrote) read-only at SystemRoot, if the machine has one: knowing
//     every disk of step 7, an absent one is told from a late one
//     without a timeout, and a machine without it boots as before;
//  9. check the result in the kernel's mount table (the root is a shared
//     tmpfs, the system disk read-only), try pivot_root as runc will (on
//     a thread and in a mount namespace of its own, onto a scratch tmpfs),
//     and print it all on one line starting with PreparedMessage: the root's type, the system disk (its ID, read
//     from it) or its absence, the controllers delegated, the agent's
//     cgroup, the modules and sysctls.
//
// While the agent runs, PID 1 reaps orphaned processes (they are
// re-parented to it; a container runtime's shims are), but never a child
// the agent started with os/exec, whose Wait must get its exit status:
// Go holds a pidfd for those until Wait, and the reaper leaves any zombie
// a pidfd of the agent refers to. It also watches the ACPI power
// button; Machine.Requests delivers a press as a request to power off.
// Machine.Halt stops cleanly: sync, unmount, remove the data disk's
// mapping, sync, then reboot(2). A
// failure during boot goes to Fatal, which prints it on the console and
// reboots after a pause, so a broken machine neither hangs silently nor
// reboots too fast to be read.
//
// # What it does not do
//
// No udev, no shell, no DHCP: the addresses come from the command line,
// the disks from their serials. It starts no container runtime or
// kubelet itself (the agent's kubernetes worker does, through kube/); it
// only makes the machine ready for them. It runs only as PID 1 on Linux;
// tests of the whole run the image in qemu (launch/vm).
package pid1

// Package vm runs Polis node machines under qemu: the node image (built by
// launch/image) booted with the agent as PID 1 (node/pid1), networked
// through a virtual switch this package owns.
//
// # The model
//
// A Machine is one boot: Start launches qemu, and the Machine ends when
// qemu exits. What outlives a boot lives in the machine's directory: its
// two disks (esp.img and data.img, created sparse and blank; the node
// formats them on first boot and finds its state on them afterwards), its
// TPM's state (tpm/: each boot runs a swtpm TPM 2.0 on it, stopped when
// qemu exits, unless Config.NoTPM; the node seals its data disk's key and
// its configuration with it, so the disks without it open nothing) and
// its console log, to which every boot appends, each line stamped with the
// host's time. Booting a node again is calling Start again with the same
// Config.
//
// qemu runs with -nodefaults (no device we did not ask for, in particular
// no NIC with outbound NAT) and -no-reboot with panic=-1 (a guest reboot or
// panic ends qemu instead of looping or hanging, so the caller sees it and
// decides: GuestRebooted tells a reboot from a power-off; once PID 1 has
// set kubelet's kernel.panic=10, a panic ends qemu 10 s later). Node parameters
// go through fw_cfg, the node's address and agent flags on the kernel
// command line (pid1.AgentFlags says why there), the disks are told apart
// by their virtio serials. The image's system disk (Config.System), when
// there is one, is attached read-only: qemu then takes a shared lock on
// the file, so every machine of a launch attaches the same one.
// Machines get DefaultMemoryMB and DefaultCPUs unless told otherwise;
// those that run Kubernetes need KubernetesMemoryMB and are better off
// with KubernetesCPUs. On a Switch, NICs offer SwitchMTU (jumbo frames).
// PowerOff presses the ACPI power button through QMP: the agent stops,
// PID 1 syncs and unmounts, and qemu exits 0. Kill pulls the plug. A
// machine whose PID 1 said it was halting and whose qemu is still running
// HaltTimeout later is stuck on its way down, out of reach of its node API
// and its power button; Start's watcher ends qemu then, as a hardware
// watchdog would reset the machine (PlugPulled; Wait returns an error),
// and the halt line still tells a reboot from a power-off. Every machine
// also has a real one, an i6300esb, which PID 1 arms and feeds (package
// node/pid1); when it fires, qemu resets the machine, which ends qemu,
// and a second QMP monitor, which the machine reads events from, tells
// the caller (WatchdogFired) and the console log.
//
// The Switch is a learning ethernet switch in the launcher's process that
// qemu reaches with its stream netdev over a unix socket: per run, no
// root, no host-wide state, and a place to cut a machine off and plug it
// back in (Cut, CutExcept, Reconnect) for partition tests.
//
// The host reaches the machines at their real addresses through a
// HostPort (gVisor's userspace TCP/IP stack plugged into the switch) and
// the HTTP CONNECT Proxy it backs, which polisctl uses when its
// configuration names it (launch's VM mode saves it there).
//
// # What it does not do (yet)
//
// TCG is the accelerator used by default; KVM is a Config option, and
// ProbeKVM checks with a short boot that a KVM guest runs. Under TCG the
// guest kernel is told what suits an emulated CPU (tcgParameters: its
// generic ChaCha20, and no speculation mitigations, which guard nothing
// on a CPU that does not speculate and cost a software-TLB flush per
// system call). Package launch
// drives these machines as the nodes of a VM cluster (Options.VM).
package vm

// Package pid1 is what the node agent does when it is a machine's init:
// the duties of PID 1 inside the node image (launch/image builds it).
//
// # The model
//
// The kernel runs the agent as /init from the initramfs, with nothing
// mounted, no modules loaded and no network. Boot turns that into a
// Machine the agent can run on, in a fixed order where each step needs the
// one before:
//
//  1. mount proc, sys, dev (devtmpfs), run and tmp;
//  2. load the kernel modules listed at ModuleListPath, in that order (the
//     image builder resolved it from the modules' .modinfo);
//  3. read the machine's settings from the kernel command line
//     (polis.address=IP/PREFIX, and the agent's flags of AgentFlags, such
//     as polis.lease-ttl=5s; AgentFlags says why there) and leave the node
//     parameters to fw_cfg (node.FWCfgParametersPath, present once
//     qemu_fw_cfg is loaded);
//  4. bring up lo and the cluster NIC with netlink;
//  5. find the ESP and data disks by their serial numbers (SerialESP,
//     SerialData), format a blank one (FAT32, ext4) and mount them under
//     StorageRoot, where localstorage expects them: esp/, data/, and a tmpfs
//     for ephemeral/. A rebooted machine finds its sealed configuration on
//     the ESP and rejoins, as a restarted process does.
//
// While the agent runs, PID 1 reaps orphaned processes (they are
// re-parented to it) and watches the ACPI power button; Machine.Requests
// delivers a press as a request to power off. Machine.Halt stops cleanly:
// sync, unmount, sync, then reboot(2). A failure during boot goes to Fatal,
// which prints it on the console and reboots after a pause, so a broken
// machine neither hangs silently nor reboots too fast to be read.
//
// # What it does not do
//
// No udev, no shell, no DHCP: the addresses come from the command line,
// the disks from their serials. It runs only as PID 1 on Linux; tests of
// the whole run the image in qemu (launch/vm).
package pid1

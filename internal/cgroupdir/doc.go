// Package cgroupdir does the few things the node's Kubernetes runners do
// with cgroup v2 directories, once, so that the control plane's
// components, the kubelet's tree and the node services handle their
// cgroups alike.
//
// A cgroup v2 is a directory of the cgroup2 mount, and everything about it
// is a file operation: mkdir makes it, its files say and set what it has.
// Its life here has five steps:
//
//   - Made (Make): a directory below a parent that exists. Not MkdirAll:
//     a missing parent means cgroupfs is not where the caller thinks, and
//     a directory made on another file system would be no cgroup at all.
//   - Given controllers (EnableControllers): a cgroup's children get only
//     the controllers it enables for them in its cgroup.subtree_control,
//     from those it has itself (cgroup.controllers). The kernel allows that
//     only in a cgroup with no processes of its own, so the processes live
//     in leaves and their parents only delegate. SetCPUWeight is the one
//     setting made here: cpu.weight, which counts only against siblings.
//   - Opened (Open) to start a process into it: the directory's descriptor
//     goes to syscall.SysProcAttr's CgroupFD with UseCgroupFD (clone3's
//     CLONE_INTO_CGROUP, kube/process's Command.CgroupFD), so the process
//     is never anywhere else, not even for the moment between its start
//     and a write to cgroup.procs.
//   - Killed (Kill): cgroup.kill sends SIGKILL to every process in it and
//     below at once, children that left their parent's process group
//     included; cgroup.events says when none is left (Populated).
//   - Removed (Remove): rmdir, which the kernel allows once no process is
//     left in it or below, and refuses with EBUSY for a moment after the
//     last one was reaped.
//
// What cannot be done is said, not hidden: errors name the directory, and
// a setting that is only nice to have (a controller the parent lacks, a
// weight without the cpu controller) comes back as a reason for the
// caller's log, not as an error, since the process runs all the same.
//
// It reads and writes files and nothing else, so it builds everywhere and
// its tests run on plain directories standing in for cgroupfs (the files
// have the same names); only the kernel makes them mean anything. It does
// not move running processes between cgroups, set limits, or read
// statistics (nodeapi reads cpu.stat and memory.current itself).
package cgroupdir

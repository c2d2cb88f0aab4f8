// Package kernelprofile finds where a Linux machine's CPUs spend their
// time, the kernel's functions named: a sampling profiler of the whole
// machine for benchmarks that run inside the node image's VMs, where no
// perf tool exists and the cost of interest (WireGuard's cipher, the
// network stack, the emulated CPU's work) is in the kernel.
//
// Start opens one perf event per online CPU, the kernel's cpu-clock
// software event (a timer, so it works on an emulated CPU without a
// performance-monitoring unit), sampling the instruction pointer at a
// given rate whatever runs there: a process, the kernel, or the idle loop.
// Stop reads the samples each CPU's ring buffer collected and names each
// one by the kernel function it fell in, from /proc/kallsyms (modules
// included); a sample in user space counts as User, whichever process it
// was, since this profiler is about the kernel.
//
// The rings are read once, at Stop: at Rate 250 each CPU's holds about a
// minute of samples, and what does not fit is counted in Profile.Lost
// rather than kept. Profiles are of wall time on each CPU, so the idle
// loop's functions (native_safe_halt and the like) show how much of it
// the CPUs had nothing to do.
//
// Opening events for the whole machine needs CAP_PERFMON or CAP_SYS_ADMIN
// (or perf_event_paranoid below 1), and naming kernel functions needs
// /proc/kallsyms to show addresses (root, or kptr_restrict 0): a test of
// the node's PID 1 has both.
package kernelprofile

// Package watchdog arms and feeds a machine's hardware watchdog through
// the kernel's watchdog device (/dev/watchdog0).
//
// # The model
//
// A hardware watchdog is a timer outside the CPU: once armed, it resets
// the machine unless it is fed (a keepalive) before its timeout runs out.
// Whatever stops the feeding resets the machine: a kernel wedged with
// its interrupts off, a livelock, a process that no longer gets the CPU.
// That is what no software on the machine can do for itself, and why a
// node that hangs comes back by itself instead of staying down until
// someone notices.
//
// Open arms the watchdog (opening the device starts it) with a timeout,
// which the driver may round; Timeout reports what it took. Keepalive
// feeds it once, Run feeds it at an interval until its context ends.
// Closing the device does not disarm it (the kernel warns and the timer
// runs on): only Disarm does, which tells the driver the stop is meant
// (the magic close). SetTimeout changes the timeout of an armed one. The
// node's PID 1 never disarms: it feeds the watchdog while the machine
// runs, and when it halts it gives the watchdog a last, longer timeout
// and stops feeding it; the kernel's watchdog core, told
// stop_on_reboot=0, keeps it counting through reboot(2), so that a
// machine stuck on its way down is reset too.
//
// # What it does not do
//
// It feeds the watchdog from one goroutine, so it vouches for the
// process and the kernel that schedules it, not for any particular
// piece of work in it. It drives only devices the kernel has a driver
// for (under qemu, i6300esb); a machine without one has no device, and
// Open says so with an error that wraps fs.ErrNotExist.
package watchdog

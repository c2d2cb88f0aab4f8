package pid1

// What the node image, the launcher and the agent as PID 1 agree on: the
// image builder (launch/image) writes these paths, the launcher names the
// disks and the command line, PID 1 reads them.
const (
	// InitPath is where the kernel runs the agent from.
	InitPath = "/init"
	// ModulesDir holds the kernel modules the image carries.
	ModulesDir = "/lib/modules"
	// ModuleListPath lists the modules to load, one path a line, in an
	// order that loads every module after what it needs.
	ModuleListPath = "/etc/polis/modules"

	// SerialESP and SerialData are the serial numbers of the ESP and data
	// disks (qemu: -drive ...,serial=polis-esp).
	SerialESP  = "polis-esp"
	SerialData = "polis-data"

	// AddressParameter is the kernel command-line parameter with the
	// node's cluster address and prefix: polis.address=10.0.0.2/24.
	AddressParameter = "polis.address"

	// StorageRoot is the node's storage root (localstorage), with the ESP
	// mounted at esp/, the data disk at data/ and a tmpfs at ephemeral/.
	StorageRoot = "/polis"

	// BootedMessage is the line PID 1 prints on the console when the
	// machine is ready and the agent starts; the launcher waits for it.
	BootedMessage = "polis: machine ready, starting the node agent"
	// HaltMessage starts the last line PID 1 prints before power-off or
	// reboot.
	HaltMessage = "polis: halting"
)

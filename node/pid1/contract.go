package pid1

// What the node image and the agent as PID 1 agree on: the image builder
// (launch/image) writes these paths, PID 1 reads them.
const (
	// InitPath is where the kernel runs the agent from.
	InitPath = "/init"
	// ModulesDir holds the kernel modules the image carries.
	ModulesDir = "/lib/modules"
	// ModuleListPath lists the modules to load, one path a line, in an
	// order that loads every module after what it needs.
	ModuleListPath = "/etc/polis/modules"
)

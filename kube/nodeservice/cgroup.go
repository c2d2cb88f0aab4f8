package nodeservice

import (
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/polis-os/polis/internal/cgroupdir"
)

// CPUWeight is the cpu.weight given to the parent of the services'
// cgroups (Spec.Cgroup's parent), against the default 100 of its
// siblings, the node's own cgroup and the kubelet's: under contention
// (one slow CPU while the node starts) the kubelet and containerd get
// four times the services' share, so the Node is Ready sooner, while the
// services still run; with the CPU idle the weight changes nothing.
const CPUWeight = 25

// cgroupRemoveTimeout bounds the wait for the kernel to let go of a
// stopped service's cgroup: rmdir says EBUSY for a moment after the last
// process was reaped.
const cgroupRemoveTimeout = 2 * time.Second

// serviceCgroup is a service's cgroup v2 directory, opened for starting
// the process in it.
type serviceCgroup struct {
	dir string
	fd  *os.File
}

// openCgroup makes dir (a service's cgroup) and its parent (the services')
// if missing, gives the parent CPUWeight if the cpu controller is enabled
// for it, and opens dir. Only the directories are required: without the
// weight the service runs unweighted, and noWeight says why.
func openCgroup(dir string) (cg *serviceCgroup, noWeight string, err error) {
	parent := filepath.Dir(dir)
	if err := cgroupdir.Make(parent, dir); err != nil {
		return nil, "", err
	}
	f, err := cgroupdir.Open(dir)
	if err != nil {
		return nil, "", err
	}
	return &serviceCgroup{dir: dir, fd: f}, cgroupdir.SetCPUWeight(parent, CPUWeight), nil
}

// close closes the directory and removes it, which cgroup v2 allows once
// no process is left in it; its parent stays, shared by the services.
// What cannot be removed is logged: a cgroup left empty costs nothing and
// the next run uses it again.
func (c *serviceCgroup) close(log *zap.Logger) {
	c.fd.Close()
	if err := cgroupdir.Remove(c.dir, cgroupRemoveTimeout); err != nil {
		log.Warn("could not remove the service's cgroup", zap.String("cgroup", c.dir), zap.Error(err))
	}
}

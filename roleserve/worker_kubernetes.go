package roleserve

import (
	"context"

	"go.uber.org/zap"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/supervisor"
)

// workerKubernetes reacts to the Kubernetes roles. Running the Kubernetes
// services is the subject of its own issue: today the worker only records
// which roles it was given, and its status says that nothing runs.
type workerKubernetes struct {
	g          *Graph
	localRoles event.ValueWatch[*cpb.Roles]   // reads
	kubernetes event.Value[*KubernetesStatus] // writes
}

func newWorkerKubernetes(g *Graph, v *Values) *workerKubernetes {
	const name = "kubernetes"
	return &workerKubernetes{
		g:          g,
		localRoles: Reads[*cpb.Roles](g, name, &v.LocalRoles),
		kubernetes: Writes[*KubernetesStatus](g, name, &v.Kubernetes),
	}
}

// kubernetesNotRun is the status note while the services are not written.
const kubernetesNotRun = "Kubernetes services are not run yet (they are the subject of their own issue): Controller and Worker only show the roles this node holds"

func (w *workerKubernetes) run(ctx context.Context) error {
	log := supervisor.Logger(ctx)
	in := w.g.Inputs("kubernetes")
	defer in.Close()
	roles := Input(in, w.localRoles, notNil)
	for {
		why, err := in.Wait(ctx)
		if err != nil {
			return err
		}
		r := roles.Latest()
		status := &KubernetesStatus{
			Controller: r.GetKubernetesController() != nil,
			Worker:     r.GetKubernetesWorker() != nil,
			Note:       kubernetesNotRun,
		}
		if status.Controller || status.Worker {
			log.Warn("this node holds Kubernetes roles, but Kubernetes services are not run yet",
				zap.Stringer("because", why), zap.Bool("controller", status.Controller), zap.Bool("worker", status.Worker))
		} else {
			log.Info("no Kubernetes roles", zap.Stringer("because", why))
		}
		w.kubernetes.Set(status)
		supervisor.Signal(ctx, supervisor.SignalHealthy)
	}
}

// Command polis-kube is the Kubernetes bundle of Polis: the upstream
// Kubernetes components, built from the k8s.io modules of one release, in one
// binary with a subcommand per component:
//
//	polis-kube apiserver          kube-apiserver
//	polis-kube controller-manager kube-controller-manager
//	polis-kube scheduler          kube-scheduler
//	polis-kube kubelet            kubelet (the node agent that runs Pods)
//	polis-kube proxy              kube-proxy (Services, in nftables mode on Polis)
//	polis-kube kubectl            kubectl
//	polis-kube version            the Kubernetes version built in
//
// Everything after the subcommand goes to the component unchanged, so its
// flags are upstream's. Upstream does not support its components as a
// library and their packages keep process-wide state, so each component runs
// as its own process of this binary; one binary keeps the build (and Go's
// build cache) shared. Build it with the main module's kube/bundle package,
// which sets the version variables at link time: without them kubectl and
// client-go cannot parse the server's version.
package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	_ "time/tzdata" // CronJob time zones, as upstream's kube-controller-manager

	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"          // the JSON log format, as upstream's mains
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as upstream's mains
	_ "k8s.io/component-base/metrics/prometheus/version"  // the version metric, as upstream's mains
	"k8s.io/component-base/version"
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

// components maps each subcommand to the run of its upstream component.
// Each builds its command only when chosen: their constructors register
// flags and metrics that the other components must not see.
var components = map[string]func() int{
	"apiserver": func() int { return cli.Run(apiserver.NewAPIServerCommand()) },
	"controller-manager": func() int {
		return cli.Run(controllermanager.NewControllerManagerCommand())
	},
	"scheduler": func() int { return cli.Run(scheduler.NewSchedulerCommand()) },
	// kubelet runs on the worker nodes (inside the VMs, next to
	// containerd); it is built with CGO_ENABLED=0 like the rest, which
	// upstream supports for Linux.
	"kubelet": func() int { return cli.Run(kubelet.NewKubeletCommand(context.Background())) },
	// kube-proxy runs beside the kubelet on worker nodes; in nftables
	// mode it programs the kernel through Debian's nft, which the system
	// disk carries (launch/systembuild).
	"proxy": func() int { return cli.Run(proxy.NewProxyCommand()) },
	"kubectl": func() int {
		// As upstream's kubectl: verbosity from the arguments before the
		// command is built, so building it can log.
		_, _ = logs.GlogSetter(kubectl.GetLogVerbosity(os.Args))
		if err := cli.RunNoErrOutput(kubectl.NewDefaultKubectlCommand()); err != nil {
			kubectlutil.CheckErr(err) // prints the error as kubectl does, and exits
		}
		return 0
	},
	"version": func() int {
		fmt.Println(version.Get().GitVersion)
		return 0
	},
}

func main() {
	if len(os.Args) < 2 || components[os.Args[1]] == nil {
		fmt.Fprintf(os.Stderr, "usage: %s {%s} [component flags]\n", os.Args[0], strings.Join(names(), "|"))
		os.Exit(2)
	}
	run := components[os.Args[1]]
	// The component sees its subcommand as its program name and reads its
	// own flags from os.Args[1:], as its upstream binary would.
	os.Args = os.Args[1:]
	os.Exit(run())
}

func names() []string {
	var n []string
	for name := range components {
		n = append(n, name)
	}
	sort.Strings(n)
	return n
}

// Command authzprobe is TestVMClusterRunsPods' attacker: run in a Pod on a
// worker node (host network, the kubelet's run directory mounted), it uses
// that node's kubelet credentials, its kubeconfig, to try what the Node
// authorizer and NodeRestriction must allow and refuse, and prints one line
// per attempt, "WHAT STATUS" (the HTTP status, 200 when it succeeded), for
// the test to check. It decides nothing itself: a test fails while an
// attack works.
//
//	authzprobe KUBECONFIG OWN-NODE OWN-SECRET OTHER-NODE OTHER-SECRET
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	if len(os.Args) != 6 {
		fmt.Fprintln(os.Stderr, "usage: authzprobe KUBECONFIG OWN-NODE OWN-SECRET OTHER-NODE OTHER-SECRET")
		os.Exit(2)
	}
	kubeconfig, ownNode, ownSecret, otherNode, otherSecret := os.Args[1], os.Args[2], os.Args[3], os.Args[4], os.Args[5]
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "authzprobe:", err)
		os.Exit(1)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "authzprobe:", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	label := []byte(`{"metadata":{"labels":{"authzprobe":"was-here"}}}`)
	report := func(what string, err error) { fmt.Printf("%s %d\n", what, code(err)) }
	_, err = cs.CoreV1().Nodes().Get(ctx, ownNode, metav1.GetOptions{})
	report("get-own-node", err)
	_, err = cs.CoreV1().Secrets("default").Get(ctx, ownSecret, metav1.GetOptions{})
	report("get-own-pods-secret", err)
	_, err = cs.CoreV1().Secrets("default").Get(ctx, otherSecret, metav1.GetOptions{})
	report("get-other-nodes-secret", err)
	_, err = cs.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{})
	report("list-secrets", err)
	_, err = cs.CoreV1().Nodes().Patch(ctx, otherNode, types.MergePatchType, label, metav1.PatchOptions{})
	report("patch-other-node", err)
	err = cs.CoreV1().Nodes().Delete(ctx, otherNode, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	report("delete-other-node", err)
}

// code is the HTTP status an answer had: 200 for none, -1 when there was
// no answer.
func code(err error) int {
	if err == nil {
		return 200
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return int(status.Status().Code)
	}
	fmt.Fprintln(os.Stderr, "authzprobe:", err)
	return -1
}

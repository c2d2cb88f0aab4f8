package controlplane

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"go.uber.org/zap"

	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/kube/pki"
	"github.com/polis-os/polis/supervisor"
)

// DNSRoleName names the ClusterRole and ClusterRoleBinding that give the
// node DNS server's user (pki.DNSUser) what it reads, and nothing else.
const DNSRoleName = "polis:dns"

// rbacObject is one object of the cluster's RBAC that Polis keeps: its
// resource path below the RBAC API and its body.
type rbacObject struct {
	resource, name string
	body           map[string]any
}

// rbacObjects are the RBAC objects every controller node keeps applied.
// Kubernetes' own bootstrap policy covers the other node services
// (kube-proxy's system:kube-proxy is bound to system:node-proxier).
func rbacObjects() []rbacObject {
	meta := map[string]any{"name": DNSRoleName, "labels": map[string]string{"app.kubernetes.io/managed-by": "polis"}}
	return []rbacObject{
		{"clusterroles", DNSRoleName, map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta,
			"rules": []map[string]any{
				{"apiGroups": []string{""}, "resources": []string{"services", "namespaces"}, "verbs": []string{"list", "watch"}},
				{"apiGroups": []string{"discovery.k8s.io"}, "resources": []string{"endpointslices"}, "verbs": []string{"list", "watch"}},
			},
		}},
		{"clusterrolebindings", DNSRoleName, map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": meta,
			"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": DNSRoleName},
			"subjects": []map[string]any{{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": pki.DNSUser}},
		}},
	}
}

// rbacRetry is how long the RBAC runnable waits before trying again
// after a failed apply. A variable so that tests can shorten it.
var rbacRetry = 5 * time.Second

// rbacApplyTimeout bounds one request of an apply: longer than a probe's,
// as a write on a starved controller (etcd's commit under TCG at load
// 5, seconds) is slower than a read of /readyz.
const rbacApplyTimeout = 30 * time.Second

// applyRBAC is the runnable that applies rbacObjects once the apiserver
// is ready, and again after each restart of it (each controller node does
// so; server-side apply with one field manager makes that idempotent). A
// failed apply is tried again every rbacRetry until it succeeds: the
// apiserver stays ready meanwhile, so no new status would wake the
// runnable, and the node DNS servers are refused until it succeeds. It
// authenticates as the apiserver's own client towards kubelets, the one
// system:masters identity a controller node's files hold: creating a role
// needs every permission the role grants.
func (r *Runner) applyRBAC(roots *x509.CertPool) supervisor.Runnable {
	return func(ctx context.Context) error {
		pair, err := tls.X509KeyPair(r.cfg.Files[pki.FileKubeletClientCert], r.cfg.Files[pki.FileKubeletClientKey])
		if err != nil {
			return fmt.Errorf("controlplane: the apiserver's client certificate: %w", err)
		}
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: true}
		defer tr.CloseIdleConnections()
		hc := &http.Client{Transport: tr, Timeout: rbacApplyTimeout}
		w := r.status.Watch()
		defer w.Close()
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		log := supervisor.Logger(ctx)
		appliedFor := 0 // the apiserver pid the objects were applied through
		for {
			st, err := w.Get(ctx, event.Filter(func(s *Status) bool { return s != nil && s.Ready && s.ReadyPID != appliedFor }))
			if err != nil {
				return err
			}
			for attempt := 1; ; attempt++ {
				err := applyObjects(ctx, hc, r.cfg.Server(), rbacObjects())
				if err == nil {
					break
				}
				log.Warn("applying the RBAC of the node services; trying again", zap.Error(err), zap.Int("attempt", attempt), zap.Duration("in", rbacRetry))
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(rbacRetry):
				}
			}
			appliedFor = st.ReadyPID
			log.Info("applied the RBAC of the node services", zap.String("role", DNSRoleName), zap.Int("apiserverPID", appliedFor))
		}
	}
}

// applyObjects applies each object with server-side apply (field manager
// polis, conflicts forced: these objects are Polis').
func applyObjects(ctx context.Context, hc *http.Client, server string, objs []rbacObject) error {
	for _, o := range objs {
		body, err := json.Marshal(o.body)
		if err != nil {
			return err
		}
		u := server + "/apis/rbac.authorization.k8s.io/v1/" + o.resource + "/" + url.PathEscape(o.name) + "?fieldManager=polis&force=true"
		req, err := http.NewRequestWithContext(ctx, http.MethodPatch, u, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/apply-patch+yaml") // JSON is YAML
		resp, err := hc.Do(req)
		if err != nil {
			return fmt.Errorf("%s %s: %w", o.resource, o.name, err)
		}
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
			return fmt.Errorf("%s %s: %s: %s", o.resource, o.name, resp.Status, msg)
		}
	}
	return nil
}

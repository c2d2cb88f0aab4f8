package kubelet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/polis-os/polis/kube/process"
	"github.com/polis-os/polis/supervisor"
)

// probeEvery is how often the Node's readiness is asked; probeTimeout
// bounds one ask.
const (
	probeEvery   = 2 * time.Second
	probeTimeout = 10 * time.Second
)

// nodeReady asks the apiserver, as the kubelet (the Node authorizer lets
// a node read its own Node), whether the Node has Ready=True. The error
// says why not.
func nodeReady(ctx context.Context, hc *http.Client, server, name string) error {
	resp, body, err := askNode(ctx, hc, http.MethodGet, server+"/api/v1/nodes/"+url.PathEscape(name), "", nil)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("reading the Node: %s", resp.Status)
	}
	var node struct {
		Status struct {
			Conditions []struct {
				Type, Status, Reason, Message string
			}
		}
	}
	if err := json.Unmarshal(body, &node); err != nil {
		return fmt.Errorf("reading the Node: %w", err)
	}
	for _, c := range node.Status.Conditions {
		if c.Type != "Ready" {
			continue
		}
		if c.Status == "True" {
			return nil
		}
		return fmt.Errorf("the Node is not Ready: %s: %s", c.Reason, c.Message)
	}
	return errors.New("the Node reports no Ready condition yet")
}

// probe is the runnable that asks nodeReady every probeEvery and publishes
// the answer, until ctx ends.
func (r *Runner) probe() supervisor.Runnable {
	return func(ctx context.Context) error {
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		tick := time.NewTicker(probeEvery)
		defer tick.Stop()
		for {
			// The credentials of now: Renew may have replaced them.
			hc, err := r.apiClient()
			if err != nil {
				return err
			}
			err = nodeReady(ctx, hc, r.cfg.server(), r.cfg.NodeName)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r.update(func(s *Status) {
				s.NodeReady = err == nil
				s.NodeNote = ""
				if err != nil {
					s.NodeNote = err.Error()
				}
			})
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-tick.C:
			}
		}
	}
}

// httpClient is a client that authenticates as the kubelet and trusts the
// Kubernetes CA.
func httpClient(creds Credentials) (*http.Client, error) {
	pair, err := tls.X509KeyPair(creds.ClientCert, creds.ClientKey)
	if err != nil {
		return nil, fmt.Errorf("the kubelet's client certificate: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(creds.CA) {
		return nil, errors.New("the Kubernetes CA holds no certificate")
	}
	// HTTP/2: an ask that times out resets its stream, not the
	// connection (a new TLS handshake for a slow apiserver).
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: true}
	return &http.Client{Transport: tr, Timeout: probeTimeout}, nil
}

// waitAPIServer waits until an apiserver answers /readyz ok through the
// local proxy, asked as the kubelet. A kubelet started before that fails
// its first steps that need the apiserver (the Node's CSINode) and retries
// them with a backoff of minutes, in which its Node is not Ready.
//
// One client asks every time (apiClient), keeping its connection: a starting
// apiserver under TCG took more than 10 s for a TLS handshake while two
// workers' runners each opened a new connection every poll, and its own
// loopback client's handshake timing out failed a post-start hook, which
// ends the apiserver (docs/benchmarks.md, issue 19).
func (r *Runner) waitAPIServer(ctx context.Context, containerd *process.Process) error {
	hc, err := r.apiClient()
	if err != nil {
		return err
	}
	for {
		err := apiServerReady(ctx, hc, r.cfg.server())
		if err == nil {
			return nil
		}
		r.note("waiting for an apiserver: " + err.Error())
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-containerd.Exited():
			return fmt.Errorf("containerd (pid %d) ended while the kubelet waited for an apiserver: %s", containerd.PID(), process.ExitString(containerd.Err()))
		case <-time.After(apiServerPoll): // polling interval; the wait is as long as the apiserver's start
		}
	}
}

// apiServerPoll is how often waitAPIServer asks.
const apiServerPoll = 500 * time.Millisecond

// apiServerReady asks server's /readyz.
func apiServerReady(ctx context.Context, hc *http.Client, server string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, server+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s", resp.Status)
	}
	return nil
}

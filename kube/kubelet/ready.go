package kubelet

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/cenkalti/backoff/v5"
	"go.uber.org/zap"

	"github.com/polis-os/polis/kube/process"
	"github.com/polis-os/polis/supervisor"
)

// Timings of the Node's watch (watchNode).
const (
	// probeTimeout bounds one ask of the apiserver (the runner's client's
	// timeout), and how much longer than watchSeconds a watch may last.
	probeTimeout = 10 * time.Second
	// watchSeconds is how long the apiserver keeps one watch of the Node
	// open; the runner then watches again from where it was.
	watchSeconds = 300
	// watchRetryFirst and watchRetryMax bound the wait before the Node is
	// read again after a failed read or watch (exponential backoff). The
	// longest is the interval of the poll this replaced: while no
	// apiserver answers or the Node is not registered, the status is
	// never staler than it was.
	watchRetryFirst = 250 * time.Millisecond
	watchRetryMax   = 2 * time.Second
)

// node is what the runner reads of a Node.
type node struct {
	Metadata struct {
		ResourceVersion string
	}
	Status struct {
		Conditions []struct {
			Type, Status, Reason, Message string
			// LastHeartbeatTime is when the kubelet last posted the
			// condition, by the node's clock (to the second).
			LastHeartbeatTime time.Time
		}
	}
}

// readiness says whether n (nil: not registered) has Ready=True, posted
// by a kubelet of this run, begun at since: nil if so, otherwise an error
// saying why not.
//
// A Ready=True posted before since is what a kubelet of an earlier run or
// boot said: after a reboot the Node says Ready until the node controller
// finds its lease gone stale (tens of seconds) and marks it Unknown, and
// a node that took that for its own word said Ready before its kubelet
// had said anything (and went back to not Ready once the controller
// caught up). A kubelet posts its Node's status at once when it starts,
// with a fresh heartbeat, so its own word comes soon. The API's times are
// whole seconds: since is compared truncated to the second.
func readiness(n *node, since time.Time) error {
	if n == nil {
		return errors.New("the Node is not registered yet")
	}
	for _, c := range n.Status.Conditions {
		if c.Type != "Ready" {
			continue
		}
		if c.Status == "True" {
			if hb := c.LastHeartbeatTime; hb.Before(since.Truncate(time.Second)) {
				return fmt.Errorf("the Node's Ready was posted at %s, before this kubelet's run began (%s): waiting for the kubelet's own word",
					hb.UTC().Format(time.RFC3339), since.UTC().Format(time.RFC3339))
			}
			return nil
		}
		return fmt.Errorf("the Node is not Ready: %s: %s", c.Reason, c.Message)
	}
	return errors.New("the Node reports no Ready condition yet")
}

// nodeQuery is the query that selects the Node by name: the Node
// authorizer lets a node list and watch nodes with it (the kubelet's own
// informer does), as it lets it get its own Node.
func nodeQuery(name string) url.Values {
	return url.Values{"fieldSelector": {"metadata.name=" + name}}
}

// listNode reads the Node named name, as a list selected by its name, so
// that a Node not registered yet is an empty list with a resourceVersion
// to watch from: the watch then sees the kubelet register it. n is nil
// while it is not registered.
func listNode(ctx context.Context, hc *http.Client, server, name string) (n *node, resourceVersion string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, server+"/api/v1/nodes?"+nodeQuery(name).Encode(), nil)
	if err != nil {
		return nil, "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, "", fmt.Errorf("reading the Node: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, "", fmt.Errorf("reading the Node: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, "", fmt.Errorf("reading the Node: %s: %s", resp.Status, truncate(bytes.TrimSpace(body)))
	}
	var list struct {
		Metadata struct {
			ResourceVersion string
		}
		Items []node
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, "", fmt.Errorf("reading the Node: %w", err)
	}
	if list.Metadata.ResourceVersion == "" {
		return nil, "", errors.New("reading the Node: the list has no resourceVersion to watch from")
	}
	if len(list.Items) > 0 {
		n = &list.Items[0]
	}
	return n, list.Metadata.ResourceVersion, nil
}

// errWatchExpired is a watch's end because the apiserver no longer has
// the resourceVersion it started from (410 Gone): the Node must be read
// again.
var errWatchExpired = errors.New("the Node's watch expired (410 Gone)")

// watchNode watches the Node named name from resourceVersion and calls
// seen with its readiness (since as for readiness) at every change, until
// the apiserver ends the watch (watchSeconds; nil error) or it fails. It returns the last
// resourceVersion it saw, from which the next watch starts.
func watchNode(ctx context.Context, hc *http.Client, server, name, resourceVersion string, since time.Time, seen func(error)) (string, error) {
	q := nodeQuery(name)
	q.Set("watch", "1")
	q.Set("resourceVersion", resourceVersion)
	q.Set("allowWatchBookmarks", "true")
	q.Set("timeoutSeconds", strconv.Itoa(watchSeconds))
	// The apiserver ends the watch; this bounds one whose connection went
	// silent (the client's pings also find those, see httpClient).
	ctx, cancel := context.WithTimeout(ctx, watchSeconds*time.Second+probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, server+"/api/v1/nodes?"+q.Encode(), nil)
	if err != nil {
		return resourceVersion, err
	}
	// The runner's client bounds whole requests; a watch lasts longer.
	streaming := *hc
	streaming.Timeout = 0
	resp, err := streaming.Do(req)
	if err != nil {
		return resourceVersion, fmt.Errorf("watching the Node: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resourceVersion, fmt.Errorf("watching the Node: %s: %s", resp.Status, truncate(bytes.TrimSpace(body)))
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var ev struct {
			Type   string
			Object json.RawMessage
		}
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) {
				return resourceVersion, nil
			}
			return resourceVersion, fmt.Errorf("watching the Node: %w", err)
		}
		switch ev.Type {
		case "ADDED", "MODIFIED", "DELETED", "BOOKMARK":
			var n node
			if err := json.Unmarshal(ev.Object, &n); err != nil {
				return resourceVersion, fmt.Errorf("watching the Node: a %s event: %w", ev.Type, err)
			}
			if n.Metadata.ResourceVersion != "" {
				resourceVersion = n.Metadata.ResourceVersion
			}
			switch ev.Type {
			case "ADDED", "MODIFIED":
				seen(readiness(&n, since))
			case "DELETED":
				seen(errors.New("the Node was deleted"))
			}
		case "ERROR":
			var st struct {
				Code            int
				Reason, Message string
			}
			if err := json.Unmarshal(ev.Object, &st); err != nil {
				return resourceVersion, fmt.Errorf("watching the Node: an ERROR event: %w", err)
			}
			if st.Code == http.StatusGone {
				return resourceVersion, errWatchExpired
			}
			return resourceVersion, fmt.Errorf("watching the Node: %s (%d): %s", st.Reason, st.Code, st.Message)
		default:
			return resourceVersion, fmt.Errorf("watching the Node: an event of unknown type %q", ev.Type)
		}
	}
}

// followNode keeps seen told of the Node's readiness (since as for
// readiness) until ctx ends: it reads the Node (listNode), then watches it
// (watchNode), again and again from the last resourceVersion while the
// watches end cleanly (after a pause if one saw nothing, so that a server
// ending them at once is not asked in a loop); after a failure it reads
// the Node afresh, at once if the watch only expired, otherwise after a
// backoff (watchRetryFirst to watchRetryMax), during which the status
// keeps what was last seen. client gives the client of now at every read
// and watch (Renew may replace the credentials). failed is told of each
// failure, for the log.
func followNode(ctx context.Context, client func() (*http.Client, error), server, name string, since time.Time, seen func(error), failed func(error)) error {
	retry := backoff.NewExponentialBackOff()
	retry.InitialInterval, retry.MaxInterval = watchRetryFirst, watchRetryMax
	for {
		hc, err := client()
		if err != nil {
			return err
		}
		n, rv, err := listNode(ctx, hc, server, name)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			seen(err) // which says why
		} else {
			seen(readiness(n, since))
			for err == nil {
				if hc, err = client(); err != nil {
					return err
				}
				before := rv
				if rv, err = watchNode(ctx, hc, server, name, rv, since, seen); err != nil {
					break
				}
				if rv != before {
					retry.Reset() // it worked: the next failure starts short again
					continue
				}
				// Ended with nothing seen: resumed after a pause, so
				// that watches ended at once are not asked in a loop
				// (nothing is missed: the next starts from rv).
				if !pause(ctx, retry.NextBackOff()) {
					return ctx.Err()
				}
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			failed(err)
			if errors.Is(err, errWatchExpired) {
				continue
			}
		}
		if !pause(ctx, retry.NextBackOff()) {
			return ctx.Err()
		}
	}
}

// pause waits for d, or less if ctx ends first: false then.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// probe is the runnable that keeps the status told whether the Node is
// Ready (followNode), by a kubelet of the run begun at since, until ctx
// ends. It logs when that changes, and failures to read or watch the Node
// when they differ from the last.
func (r *Runner) probe(since time.Time) supervisor.Runnable {
	return func(ctx context.Context) error {
		log := supervisor.Logger(ctx)
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		lastNote, lastFailure := "\x00none yet", ""
		seen := func(err error) {
			note := ""
			if err != nil {
				note = err.Error()
			}
			if note != lastNote {
				if err == nil {
					log.Info("the Node is Ready")
				} else {
					log.Info("the Node is not Ready", zap.String("why", note))
				}
				lastNote = note
			}
			r.update(func(s *Status) { s.NodeReady, s.NodeNote = err == nil, note })
		}
		failed := func(err error) {
			if err.Error() != lastFailure {
				log.Info("reading or watching the Node failed; reading it again", zap.Error(err))
				lastFailure = err.Error()
			}
		}
		return followNode(ctx, r.apiClient, r.cfg.server(), r.cfg.NodeName, since, seen, failed)
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
	// connection (a new TLS handshake for a slow apiserver). Its pings
	// find a connection gone silent (an apiserver's node lost behind the
	// local proxy) under the Node's watch, which sends nothing while the
	// Node does not change; they are generous, as an apiserver under TCG
	// may answer late.
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2: true,
		HTTP2:             &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 20 * time.Second},
	}
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

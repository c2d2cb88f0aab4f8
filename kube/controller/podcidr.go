package controller

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
	"net/netip"
	"net/url"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/kube/controlplane"
	"github.com/polis-os/polis/kube/kubelet"
	"github.com/polis-os/polis/kube/pki"
	"github.com/polis-os/polis/supervisor"
)

// Every Node's spec.podCIDR says the pod range the curator gave the Polis
// node of the same name: what Kubernetes components and workloads read
// to learn a node's Pod addresses. Who writes it, and why so:
//
//   - not the kubelet: NodeRestriction forbids a kubelet to change its
//     Node's spec, and the kubelet sets no podCIDR when it registers;
//   - not kube-controller-manager's allocator (--allocate-node-cidrs),
//     which would choose ranges of its own, unaware of the curator's,
//     which the nodes' CNI configuration and routes use;
//   - so each controller node's agent, as podCIDRUser in system:masters,
//     with a certificate issued in memory for this run from the
//     cluster's Kubernetes PKI (never written to disk), against its own
//     apiserver. Every controller node does the same, harmlessly: each
//     sets only an empty podCIDR (Kubernetes refuses to change one that
//     is set), with the same value.
//
// It follows both sides: the ranges in the curator's namespace (one etcd
// watch) and the Nodes (a Kubernetes list, then a watch), and patches a
// Node whose podCIDR is empty as soon as both its range and itself exist.
// A Node deleted before that is dropped (its DELETED event, or the 404 of
// the patch when that event has not been read yet).
//
// It also deletes the Node of a deleted Polis node. The curator gives a
// node's range back to the pool only in the transaction that deletes the
// node (DeleteNode; curator/podnetwork.go), and the next worker may get it; nothing else
// deletes the old Node, which would then say the new worker's podCIDR.
// A Node is deleted (as a Node already gone is no error, every controller
// node may do the same):
//
//   - when a range's key is deleted: the Node named for the node that
//     held it;
//   - when the Nodes and ranges are read again (the apiserver ends its
//     watch every few minutes): the Node of a node that held a range at
//     the last look and holds none now;
//   - when a Node, listed or reported by the watch, has a podCIDR while
//     the node of its name holds no range, in a fresh read of etcd (the
//     ranges watched may lag behind another controller node that has
//     just set that podCIDR). Only this worker sets podCIDR, and only to
//     a range the node holds, which it keeps until it is deleted: so its
//     node was deleted, perhaps while no controller ran. Its podCIDR then
//     names a range that another node holds, or none does;
//   - when the Nodes are listed (each follow: at the start, and whenever
//     the apiserver has ended its watch), if the role server says where
//     the curator keeps its node records (Config.Nodes): a Polis node's
//     Node, whatever its podCIDR, whose node has no record in a read made
//     after the list (sweep). Its node was deleted, perhaps while no
//     controller ran: the curator writes a node's record before the node
//     can have a certificate to register its Node with, and deletes the
//     record only with the node (one that had a certificate is
//     decommissioned first, and its key retired with the record: its ID
//     never registers again).
//
// The sweep deletes only what it can tell is a Polis node's Node whose
// node is gone. A Polis node's Node is named as a node ID and carries a
// mark of the node's kubelet runner (kube/kubelet): the annotation
// kubelet.LabelsAnnotation, which it sets on every Node it keeps (even
// without labels), or a label under kubelet.LabelPrefix, which only it
// sets. Any other Node is not Polis' to delete, and is left alone; so is
// a Polis node's Node not marked yet (its runner sets the mark within
// seconds of the registration). Records that do not look like the
// curator's (none at all, when this node has one; a node that holds a
// range but has no record, when the curator writes and deletes both in
// one transaction) mean they were looked for in the wrong place: nothing
// is deleted, and a warning says so. Each delete of a Node read (the
// sweep's, the podCIDR rule's) names the UID of the Node as read: a Node
// registered anew under that name since is another object, and the
// apiserver keeps it (409). Not the resource version: the
// node lifecycle controller changes a Node that stopped reporting (its
// conditions, its taints), which is not a reason to keep it.
//
// Without the node records, a Node whose podCIDR is empty and whose node
// holds no range is not deleted on sight: it may be a live worker's,
// waiting for its range (the pool was empty, say), which cannot be told
// from the Node of a node deleted unseen before its podCIDR was set; that
// one names no range, so it conflicts with no other Node, and stays. What
// was last seen is forgotten when this runnable restarts (after a
// failure, or to renew its certificate): a range deleted in between is
// caught only by the podCIDR rule, or the sweep. A podCIDR set by hand on
// the Node of a node without a range gets that Node deleted too: Nodes
// are the Polis nodes', and only this worker is meant to set their
// podCIDR.
//
// A delete that fails otherwise than 404 or 409 ends the follow, and with
// it the runnable, with the error; its supervisor starts it again after
// its backoff, and the next follow lists the Nodes, and sweeps, afresh.

// podCIDRUser is the Kubernetes user the agent sets podCIDRs as.
const podCIDRUser = "polis:pod-cidr"

// podCIDRCertLifetime bounds the certificate; the run ends before (see
// podCIDRs.run) and the next one issues a fresh one.
const podCIDRCertLifetime = 24 * time.Hour

// podCIDRs is the runnable that keeps spec.podCIDR.
type podCIDRs struct {
	hc     *http.Client
	server string
	// cli reads the curator's namespace, where source says the ranges
	// are.
	cli    *clientv3.Client
	source PodRangeSource
	// nodes says where the node records are; zero: sweep deletes
	// nothing.
	nodes  NodeRecordSource
	status event.ValueWatch[*controlplane.Status]
	// renew is when the run ends to issue a fresh certificate.
	renew time.Time
	// ranges are the ranges given out, by node ID, as last seen: kept
	// by follow, and across its calls.
	ranges map[string]netip.Prefix
}

// newPodCIDRs issues the client certificate and returns the runnable.
func newPodCIDRs(cluster *pki.Cluster, server string, cli *clientv3.Client, source PodRangeSource, nodes NodeRecordSource, status event.ValueWatch[*controlplane.Status]) (*podCIDRs, error) {
	now := time.Now()
	pair, err := cluster.IssueClient(podCIDRUser, []string{"system:masters"}, now)
	if err != nil {
		return nil, fmt.Errorf("issuing the pod CIDR writer's certificate: %w", err)
	}
	cert, err := tls.X509KeyPair(pair.Cert, pair.Key)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(cluster.CACert) {
		return nil, errors.New("the Kubernetes CA certificate does not parse")
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	return &podCIDRs{
		hc:     &http.Client{Transport: tr},
		server: server,
		cli:    cli,
		source: source,
		nodes:  nodes,
		status: status,
		renew:  now.Add(podCIDRCertLifetime / 2),
	}, nil
}

// nodeObject is what is read of a Node.
type nodeObject struct {
	Metadata struct {
		Name            string            `json:"name"`
		UID             string            `json:"uid"`
		ResourceVersion string            `json:"resourceVersion"`
		Labels          map[string]string `json:"labels"`
		Annotations     map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		PodCIDR string `json:"podCIDR"`
	} `json:"spec"`
}

// nodeEvent is what the Node watch reports: a Node added or changed, or
// deleted.
type nodeEvent struct {
	node    nodeObject
	deleted bool
}

// errWatchEnded is follow's return when the apiserver ended its Node
// watch, as it does every few minutes by design.
var errWatchEnded = errors.New("the Node watch ended")

func (p *podCIDRs) run(ctx context.Context) error {
	log := supervisor.Logger(ctx)
	defer p.hc.CloseIdleConnections()
	if _, err := event.Get(ctx, p.status, event.Filter(func(s *controlplane.Status) bool { return s != nil && s.Ready })); err != nil {
		return err
	}
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	// The run ends before the certificate does; the next one issues a
	// fresh one (see Start).
	ctx, cancel := context.WithDeadline(ctx, p.renew)
	defer cancel()
	for {
		err := p.follow(ctx, log)
		switch {
		case errors.Is(err, errWatchEnded):
			continue
		case ctx.Err() != nil && time.Now().After(p.renew):
			return errors.New("renewing the pod CIDR writer's certificate")
		default:
			return err
		}
	}
}

// follow reads the ranges and lists the Nodes, and then follows both until
// either watch ends. Between calls, p.ranges keeps the ranges last seen,
// so that a holder that disappeared meanwhile is still noticed.
func (p *podCIDRs) follow(ctx context.Context, log *zap.Logger) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ranges, rev, err := p.readRanges(ctx)
	if err != nil {
		return err
	}
	// The nodes that held a range at the last look and hold none now
	// were deleted meanwhile (a range leaves its node only so).
	for id, r := range p.ranges {
		if _, ok := ranges[id]; ok {
			continue
		}
		if err := p.deleteNode(ctx, log, id, "", "its Polis node's pod range was given back while the pod ranges were not watched", zap.Stringer("podRange", r)); err != nil {
			return err
		}
	}
	p.ranges = ranges
	rangeEvents := p.cli.Watch(clientv3.WithRequireLeader(ctx), p.source.Prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	nodes, rv, err := p.listNodes(ctx)
	if err != nil {
		return err
	}
	// The Nodes of Polis nodes deleted unseen go first; the watch
	// reports any Node registered anew in their place.
	swept, err := p.sweep(ctx, log, nodes)
	if err != nil {
		return err
	}
	// waiting are the Nodes whose podCIDR is empty, by name.
	waiting := map[string]bool{}
	for _, n := range nodes {
		if swept[n.Metadata.Name] {
			continue
		}
		if err := p.sawNode(ctx, log, n, waiting); err != nil {
			return err
		}
	}
	nodeEvents := make(chan nodeEvent)
	watchDone := make(chan error, 1)
	go func() { watchDone <- p.watchNodes(ctx, rv, nodeEvents) }()
	defer func() {
		cancel()
		<-watchDone
	}()
	for {
		for name := range waiting {
			r, ok := p.ranges[name]
			if !ok {
				continue
			}
			switch err := p.patch(ctx, name, r); {
			case isNotFound(err):
				// Deleted since it was seen, its DELETED event not
				// read yet: nothing is left to set.
				log.Info("the Node was deleted before its podCIDR could be set", zap.String("node", name), zap.Stringer("podRange", r))
			case err != nil:
				return err
			default:
				log.Info("set the Node's podCIDR", zap.String("node", name), zap.Stringer("podCIDR", r))
			}
			delete(waiting, name)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-watchDone:
			watchDone <- err // for the deferred wait
			if ctx.Err() == nil && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) {
				return errWatchEnded
			}
			return fmt.Errorf("watching Nodes: %w", err)
		case ev := <-nodeEvents:
			if ev.deleted {
				// Patching it would fail (404) and end this follow.
				delete(waiting, ev.node.Metadata.Name)
				continue
			}
			if err := p.sawNode(ctx, log, ev.node, waiting); err != nil {
				return err
			}
		case wr, ok := <-rangeEvents:
			if !ok {
				// Closed without a word: the context ended, or the
				// client was closed under it.
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return errors.New("the watch of the pod ranges ended")
			}
			if err := wr.Err(); err != nil {
				return fmt.Errorf("the watch of the pod ranges ended: %w", err)
			}
			if err := p.sawRanges(ctx, log, wr.Events, waiting); err != nil {
				return err
			}
		}
	}
}

// sawRanges applies changes of the ranges to p.ranges, and deletes the
// Node of every node whose range was deleted: its Polis node was deleted.
func (p *podCIDRs) sawRanges(ctx context.Context, log *zap.Logger, events []*clientv3.Event, waiting map[string]bool) error {
	gone := map[string]netip.Prefix{}
	for _, ev := range events {
		r, ok := p.source.Range(ev.Kv.Key)
		if !ok {
			continue
		}
		if ev.Type == clientv3.EventTypePut {
			p.ranges[string(ev.Kv.Value)] = r
			continue
		}
		for id, had := range p.ranges {
			if had == r {
				delete(p.ranges, id)
				gone[id] = r
			}
		}
	}
	for id, r := range gone {
		if _, ok := p.ranges[id]; ok {
			// It holds a range again in the same batch: alive.
			continue
		}
		delete(waiting, id)
		if err := p.deleteNode(ctx, log, id, "", "its Polis node's pod range was given back", zap.Stringer("podRange", r)); err != nil {
			return err
		}
	}
	return nil
}

// sawNode takes in Node n, as listed or as the watch reports it added or
// changed: it waits for its range if its podCIDR is empty, is reported if
// its podCIDR is not its node's range, and is deleted if its podCIDR is set
// while its node holds no range (see the top of this file).
func (p *podCIDRs) sawNode(ctx context.Context, log *zap.Logger, n nodeObject, waiting map[string]bool) error {
	name := n.Metadata.Name
	if n.Spec.PodCIDR == "" {
		waiting[name] = true
		return nil
	}
	delete(waiting, name)
	if r, ok := p.ranges[name]; ok {
		if n.Spec.PodCIDR != r.String() {
			log.Warn("a Node's podCIDR is not its pod range, and Kubernetes does not change one that is set", zap.String("node", name), zap.String("podCIDR", n.Spec.PodCIDR), zap.Stringer("podRange", r))
		}
		return nil
	}
	// The ranges seen may lag behind another controller node that has
	// just set this podCIDR from a range given after they were read:
	// only a fresh read may say the node holds none.
	now, _, err := p.readRanges(ctx)
	if err != nil {
		return err
	}
	if _, ok := now[name]; ok {
		return nil
	}
	why := "its Polis node holds no pod range, and its podCIDR names one that no node holds"
	fields := []zap.Field{zap.String("podCIDR", n.Spec.PodCIDR)}
	if r, err := netip.ParsePrefix(n.Spec.PodCIDR); err == nil {
		for id, had := range now {
			if had == r {
				why = "its Polis node holds no pod range, and its podCIDR names another node's"
				fields = append(fields, zap.String("podRangeHolder", id))
			}
		}
	}
	return p.deleteNode(ctx, log, name, n.Metadata.UID, why, fields...)
}

// polisNode says whether Node n is a Polis node's: named as a node ID
// (the kubelet registers it so) and marked by the node's kubelet runner,
// which sets the annotation kubelet.LabelsAnnotation on every Node it
// keeps the labels of (even when the node has none) and is alone to set
// labels under kubelet.LabelPrefix. A Node that has neither mark, its own
// kubelet's runner not having reached it yet, is not known to be Polis'.
func polisNode(n nodeObject) bool {
	if identity.ValidateNodeID(n.Metadata.Name) != nil {
		return false
	}
	if _, ok := n.Metadata.Annotations[kubelet.LabelsAnnotation]; ok {
		return true
	}
	for k := range n.Metadata.Labels {
		if strings.HasPrefix(k, kubelet.LabelPrefix) {
			return true
		}
	}
	return false
}

// sweep deletes, among the Nodes just listed, every Polis node's Node
// (polisNode) whose Polis node has no record in a read of the curator's
// node records made after the list: its node was deleted, perhaps while
// no controller ran, whatever its podCIDR says (see the top of this
// file). It returns the names of the Nodes it deleted or found gone or
// registered anew: what was listed of them is out of date, and the watch
// reports what is there now. It deletes nothing when p.nodes is zero, or
// when the records do not look like the curator's (none at all, or a
// range held by a node without a record): a wrong prefix must not read as
// every node deleted.
func (p *podCIDRs) sweep(ctx context.Context, log *zap.Logger, nodes []nodeObject) (map[string]bool, error) {
	swept := map[string]bool{}
	if p.nodes.Prefix == "" {
		return swept, nil
	}
	var polis []nodeObject
	for _, n := range nodes {
		// Never without the precondition (the apiserver always gives
		// a UID).
		if polisNode(n) && n.Metadata.UID != "" {
			polis = append(polis, n)
		}
	}
	if len(polis) == 0 {
		return swept, nil
	}
	records, ranges, err := p.readRecords(ctx)
	if err != nil {
		return nil, err
	}
	if len(records) == 0 {
		log.Warn("not deleting the Nodes of deleted Polis nodes: no node record found, not even this node's", zap.String("nodeRecordPrefix", p.nodes.Prefix))
		return swept, nil
	}
	for id, r := range ranges {
		if !records[id] {
			log.Warn("not deleting the Nodes of deleted Polis nodes: a node holds a pod range but has no record, so the records are not where they were looked for", zap.String("nodeRecordPrefix", p.nodes.Prefix), zap.String("podRangeHolder", id), zap.Stringer("podRange", r))
			return swept, nil
		}
	}
	for _, n := range polis {
		name := n.Metadata.Name
		if records[name] {
			continue
		}
		swept[name] = true
		fields := []zap.Field{zap.String("uid", n.Metadata.UID)}
		if n.Spec.PodCIDR != "" {
			fields = append(fields, zap.String("podCIDR", n.Spec.PodCIDR))
		}
		if err := p.deleteNode(ctx, log, name, n.Metadata.UID, "its Polis node has no record: the node was deleted", fields...); err != nil {
			return nil, err
		}
	}
	return swept, nil
}

// readRecords reads, at one revision, which Polis nodes have a record and
// the pod ranges given out, by node ID.
func (p *podCIDRs) readRecords(ctx context.Context) (map[string]bool, map[string]netip.Prefix, error) {
	resp, err := p.cli.Txn(ctx).Then(
		clientv3.OpGet(p.nodes.Prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(p.source.Prefix, clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return nil, nil, fmt.Errorf("reading the node records and pod ranges: %w", err)
	}
	if len(resp.Responses) != 2 {
		return nil, nil, fmt.Errorf("reading the node records and pod ranges: %d answers to 2 reads", len(resp.Responses))
	}
	records := map[string]bool{}
	for _, kv := range resp.Responses[0].GetResponseRange().GetKvs() {
		if id, ok := strings.CutPrefix(string(kv.Key), p.nodes.Prefix); ok && id != "" {
			records[id] = true
		}
	}
	ranges := map[string]netip.Prefix{}
	for _, kv := range resp.Responses[1].GetResponseRange().GetKvs() {
		if r, ok := p.source.Range(kv.Key); ok {
			ranges[string(kv.Value)] = r
		}
	}
	return records, ranges, nil
}

// deleteNode deletes Node name, whose Polis node was deleted, logging why;
// a Node that is not there (never registered, or deleted by another
// controller node first) is no error. With uid, only the Node of that UID
// is deleted: one registered anew since it was read (the apiserver's 409)
// is kept, and logged.
func (p *podCIDRs) deleteNode(ctx context.Context, log *zap.Logger, name, uid, why string, fields ...zap.Field) error {
	var opts []byte
	contentType := ""
	if uid != "" {
		var err error
		opts, err = json.Marshal(map[string]any{"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": map[string]any{"uid": uid}})
		if err != nil {
			return err
		}
		contentType = "application/json"
	}
	body, err := p.do(ctx, http.MethodDelete, "/api/v1/nodes/"+url.PathEscape(name), contentType, opts)
	switch {
	case isNotFound(err):
		return nil
	case uid != "" && isConflict(err):
		log.Info("kept a Node registered anew since it was read, though its Polis node was deleted", zap.String("node", name), zap.String("uid", uid), zap.String("reason", why), zap.Error(err))
		return nil
	case err != nil:
		return fmt.Errorf("deleting Node %s, whose Polis node was deleted: %w", name, err)
	}
	if err := body.Close(); err != nil {
		return fmt.Errorf("deleting Node %s, whose Polis node was deleted: %w", name, err)
	}
	log.Info("deleted the Node of a deleted Polis node", append([]zap.Field{zap.String("node", name), zap.String("reason", why)}, fields...)...)
	return nil
}

// readRanges reads the pod ranges given out, by node ID, and the etcd
// revision they were read at.
func (p *podCIDRs) readRanges(ctx context.Context) (map[string]netip.Prefix, int64, error) {
	resp, err := p.cli.Get(ctx, p.source.Prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("reading the pod ranges: %w", err)
	}
	out := make(map[string]netip.Prefix, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if r, ok := p.source.Range(kv.Key); ok {
			out[string(kv.Value)] = r
		}
	}
	return out, resp.Header.Revision, nil
}

// listNodes lists the Nodes and the resource version to watch from.
func (p *podCIDRs) listNodes(ctx context.Context) ([]nodeObject, string, error) {
	body, err := p.do(ctx, http.MethodGet, "/api/v1/nodes", "", nil)
	if err != nil {
		return nil, "", err
	}
	defer body.Close()
	var list struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Items []nodeObject `json:"items"`
	}
	if err := json.NewDecoder(io.LimitReader(body, 64<<20)).Decode(&list); err != nil {
		return nil, "", fmt.Errorf("listing Nodes: %w", err)
	}
	return list.Items, list.Metadata.ResourceVersion, nil
}

// watchNodes sends every Node added, changed or deleted after rv to out,
// until the watch ends (ctx, or the apiserver ending it).
func (p *podCIDRs) watchNodes(ctx context.Context, rv string, out chan<- nodeEvent) error {
	q := url.Values{"watch": {"1"}, "resourceVersion": {rv}, "allowWatchBookmarks": {"false"}}
	body, err := p.do(ctx, http.MethodGet, "/api/v1/nodes?"+q.Encode(), "", nil)
	if err != nil {
		return err
	}
	defer body.Close()
	dec := json.NewDecoder(body)
	for {
		var ev struct {
			Type   string     `json:"type"`
			Object nodeObject `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			return err
		}
		var sent nodeEvent
		switch ev.Type {
		case "ADDED", "MODIFIED":
			sent = nodeEvent{node: ev.Object}
		case "DELETED":
			sent = nodeEvent{node: ev.Object, deleted: true}
		case "ERROR":
			return errors.New("the apiserver ended the watch (its resource version expired)")
		default:
			continue
		}
		select {
		case out <- sent:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// patch sets Node name's podCIDR (and podCIDRs) to r.
func (p *podCIDRs) patch(ctx context.Context, name string, r netip.Prefix) error {
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"podCIDR": r.String(), "podCIDRs": []string{r.String()}}})
	if err != nil {
		return err
	}
	body, err := p.do(ctx, http.MethodPatch, "/api/v1/nodes/"+url.PathEscape(name), "application/merge-patch+json", patch)
	if err != nil {
		return fmt.Errorf("setting Node %s's podCIDR: %w", name, err)
	}
	return body.Close()
}

// apiError is an answer of the apiserver other than 2xx, kept apart so
// that a caller can tell a Node that is gone (isNotFound) from a failure.
type apiError struct {
	method, path string
	status       string
	code         int
	msg          []byte
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s %s: %s: %s", e.method, e.path, e.status, e.msg)
}

// isNotFound says whether err is the apiserver's 404: the object does not
// exist.
func isNotFound(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.code == http.StatusNotFound
}

// isConflict says whether err is the apiserver's 409: here, a delete's
// precondition did not hold.
func isConflict(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.code == http.StatusConflict
}

// do makes one request to the apiserver and returns the body of a 2xx
// answer; any other is an *apiError with the apiserver's message.
func (p *podCIDRs) do(ctx context.Context, method, path, contentType string, body []byte) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, method, p.server+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, &apiError{method: method, path: path, status: resp.Status, code: resp.StatusCode, msg: bytes.TrimSpace(msg)}
	}
	return resp.Body, nil
}

package kubelet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/polis-os/polis/supervisor"
)

// LabelsAnnotation is the Node annotation that lists the label keys Polis
// set (comma-separated, sorted): a label Polis set and the node's Polis
// labels no longer hold is removed from the Node, while labels others set
// are left alone.
const LabelsAnnotation = "node.polis-os.io/labels"

// Label keeping: how often the Node's labels are checked again when
// nothing changed (a kubelet that registered the Node anew brings the
// labels of its start), and how long a failed attempt waits (the Node not
// registered yet, no apiserver).
const (
	labelsResync = time.Minute
	labelsRetry  = 2 * time.Second
)

// SetLabels replaces the Node's labels (already mapped, NodeLabels): the
// runner patches the Node to hold them, and removes those it set before
// that are no longer there. Labels already set are kept when nothing
// changed. The kubelet started with the labels of the run's start
// (--node-labels) registers a new Node with those; the runner brings it up
// to date.
func (r *Runner) SetLabels(labels map[string]string) {
	r.labels.Set(maps.Clone(labels))
}

// labeller is the runnable that keeps the Node's labels as SetLabels last
// said, as the kubelet (NodeRestriction lets a node change its own Node's
// labels outside the kubernetes.io and k8s.io namespaces).
func (r *Runner) labeller() supervisor.Runnable {
	return func(ctx context.Context) error {
		log := supervisor.Logger(ctx)
		w := r.labels.Watch()
		defer w.Close()
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		want, err := w.Get(ctx)
		if err != nil {
			return err
		}
		var lastErr string
		for {
			wait := labelsResync
			changed, err := r.applyLabels(ctx, want)
			switch {
			case err != nil:
				wait = labelsRetry
				// The Node is not registered for the first seconds of
				// every start: say so once, not every retry.
				if err.Error() != lastErr {
					log.Info("the Node's labels are not applied yet", zap.Error(err))
				}
				lastErr = err.Error()
			case changed:
				log.Info("applied the Node's labels", zap.Any("labels", want))
				lastErr = ""
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-w.Ready():
				if want, err = w.Get(ctx); err != nil {
					t.Stop()
					return err
				}
			case <-t.C:
			}
			t.Stop()
		}
	}
}

// applyLabels reads the Node and patches it when its labels differ from
// want; it reports whether it patched.
func (r *Runner) applyLabels(ctx context.Context, want map[string]string) (bool, error) {
	hc, err := r.apiClient()
	if err != nil {
		return false, err
	}
	nodeURL := r.cfg.server() + "/api/v1/nodes/" + url.PathEscape(r.cfg.NodeName)
	var node struct {
		Metadata struct {
			Labels      map[string]string
			Annotations map[string]string
		}
	}
	if err := call(ctx, hc, http.MethodGet, nodeURL, "", nil, &node); err != nil {
		return false, err
	}
	patch, needed := labelPatch(node.Metadata.Labels, node.Metadata.Annotations, want)
	if !needed {
		return false, nil
	}
	if err := call(ctx, hc, http.MethodPatch, nodeURL, "application/merge-patch+json", patch, nil); err != nil {
		return false, err
	}
	return true, nil
}

// labelPatch is the JSON merge patch that makes a Node with labels and
// annotations hold want: every label of want set, every label Polis set
// before (the annotation's, and any under LabelPrefix, which only Polis
// sets) and want lacks removed, the annotation listing want's keys.
// needed is false when the Node already holds all that.
func labelPatch(labels, annotations, want map[string]string) (patch []byte, needed bool) {
	set := map[string]any{}
	for k, v := range want {
		if cur, ok := labels[k]; !ok || cur != v {
			set[k] = v
		}
	}
	managed := map[string]bool{}
	if a := annotations[LabelsAnnotation]; a != "" {
		for k := range strings.SplitSeq(a, ",") {
			managed[k] = true
		}
	}
	for k := range labels {
		if strings.HasPrefix(k, LabelPrefix) {
			managed[k] = true
		}
	}
	for k := range managed {
		if _, keep := want[k]; !keep {
			if _, there := labels[k]; there {
				set[k] = nil // removes it
			}
		}
	}
	keys := strings.Join(slices.Sorted(maps.Keys(want)), ",")
	cur, annotated := annotations[LabelsAnnotation]
	if len(set) == 0 && annotated && cur == keys {
		return nil, false
	}
	meta := map[string]any{"annotations": map[string]string{LabelsAnnotation: keys}}
	if len(set) > 0 {
		meta["labels"] = set
	}
	patch, _ = json.Marshal(map[string]any{"metadata": meta}) // plain maps: never fails
	return patch, true
}

// call sends one request to the apiserver and decodes a 200's body into
// out (if not nil); any other answer is an error naming it.
func call(ctx context.Context, hc *http.Client, method, url, contentType string, body []byte, out any) error {
	resp, data, err := askNode(ctx, hc, method, url, contentType, body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s the Node: %s: %s", method, resp.Status, truncate(bytes.TrimSpace(data)))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s the Node: %w", method, err)
	}
	return nil
}

// askNode sends one request about the Node to the apiserver and returns
// the answer, its body read (1 MiB at most) and closed; a 404 is the
// error that the Node is not registered yet.
func askNode(ctx context.Context, hc *http.Client, method, url, contentType string, body []byte) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode == http.StatusNotFound {
		return nil, nil, errors.New("the Node is not registered yet")
	}
	return resp, data, nil
}

package memory

import (
	"github.com/prometheus/client_golang/prometheus"
)

// The metric vectors are shared by all values of the process and labelled
// with the value's Name. Values without a name share the label "unnamed".
// Counting is always on (an atomic add per event); exposing the figures is
// up to the program, through RegisterMetrics.
var (
	setsTotal = prometheus.NewCounterVec(prometheus.CounterOpts(metricOpts("sets_total",
		"Updates of in-memory event values (Sets dropped by Equal are not counted).")), []string{"value"})
	deliveriesTotal = prometheus.NewCounterVec(prometheus.CounterOpts(metricOpts("deliveries_total",
		"Data returned by Get to watchers of in-memory event values.")), []string{"value"})
	watchersOpen = prometheus.NewGaugeVec(prometheus.GaugeOpts(metricOpts("watchers",
		"Open (not yet closed) watchers of in-memory event values.")), []string{"value"})
)

// metricOpts names a metric polis_event_<name>.
func metricOpts(name, help string) prometheus.Opts {
	return prometheus.Opts{Namespace: "polis", Subsystem: "event", Name: name, Help: help}
}

// RegisterMetrics registers the metrics of all in-memory values with reg:
// polis_event_sets_total, polis_event_deliveries_total and
// polis_event_watchers, each labelled by value name.
func RegisterMetrics(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{setsTotal, deliveriesTotal, watchersOpen} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// valueMetrics holds one value's children of the vectors, looked up once so
// that the hot paths only do atomic adds.
type valueMetrics struct {
	sets       prometheus.Counter
	deliveries prometheus.Counter
	watchers   prometheus.Gauge
}

func (v *Value[T]) getMetrics() *valueMetrics {
	if m := v.metrics.Load(); m != nil {
		return m
	}
	name := v.Name
	if name == "" {
		name = "unnamed"
	}
	m := &valueMetrics{
		sets:       setsTotal.WithLabelValues(name),
		deliveries: deliveriesTotal.WithLabelValues(name),
		watchers:   watchersOpen.WithLabelValues(name),
	}
	if v.metrics.CompareAndSwap(nil, m) {
		return m
	}
	return v.metrics.Load()
}

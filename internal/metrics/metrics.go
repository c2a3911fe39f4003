// Package metrics is what a warren process counts and measures, in
// Prometheus's model (docs/API.md, "Metrics"): the API's requests by route
// and status, how long each kind of operation took, and gauges read from
// their owners at each scrape (sandboxes by state and runtime, warm pools,
// the node's capacity and what it promised). No label takes a sandbox,
// snapshot or tenant ID: every label's values are a small fixed set (routes,
// status codes, operations, runtimes, states) or the node's templates.
//
// A Registry is safe for concurrent use. The package knows nothing of the
// subsystems it measures: they call Observe and Request, and register
// readers with Gauges.
package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Operations Observe takes.
const (
	OpCreate      = "create"       // a create, to the sandbox running
	OpRestore     = "restore"      // a restore of count sandboxes, to all running
	OpFork        = "fork"         // a fork, to its children running
	OpSnapshotAck = "snapshot_ack" // a snapshot's acknowledgement: its disk quiesced and cloned
	OpExec        = "exec"         // an exec answered whole (not streamed, not in the background)
	OpUpload      = "upload"       // a snapshot's upload: its acknowledgement to durable
	OpPause       = "pause"        // a pause, to its disk durable and the sandbox paused
	OpResume      = "resume"       // a resume of a paused sandbox its node held, in place
	OpWake        = "wake"         // a wake of a paused sandbox from its pause snapshot, to running
)

// Registry holds one process's metrics.
type Registry struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	ops      *prometheus.HistogramVec
}

// New returns a registry with the Go runtime's and the process's own
// collectors, and the API's and the operations' families.
func New() *Registry {
	r := &Registry{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_api_requests_total",
			Help: "API requests answered, by route (the route table's method and path pattern; \"other\" for none), and status code.",
		}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warren_api_request_duration_seconds",
			Help:    "How long the API took to answer, by route; a streamed answer counts to its end.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18), // 0.5 ms to about 65 s
		}, []string{"route"}),
		ops: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warren_operation_duration_seconds",
			Help:    "How long operations that succeeded took, by operation: create, restore, fork, snapshot_ack, exec, upload (a snapshot's acknowledgement to durable).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
		}, []string{"op"}),
	}
	r.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		r.requests, r.latency, r.ops)
	return r
}

// Handler serves the registry in Prometheus's text format (or OpenMetrics,
// when the scraper asks for it).
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{EnableOpenMetrics: true})
}

// Request counts an API request to route answered with code after d.
func (r *Registry) Request(route string, code int, d time.Duration) {
	if r == nil {
		return
	}
	if route == "" {
		route = "other"
	}
	r.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	r.latency.WithLabelValues(route).Observe(d.Seconds())
}

// Observe records that operation op (an Op constant) took d.
func (r *Registry) Observe(op string, d time.Duration) {
	if r == nil {
		return
	}
	r.ops.WithLabelValues(op).Observe(d.Seconds())
}

// Sample is one value of a gauge family, with its label values in the
// family's order.
type Sample struct {
	Labels []string
	Value  float64
}

// Family describes a family of values read at each scrape: gauges, or
// counters (Counter) when the values only grow while the process runs.
type Family struct {
	Name, Help string
	Labels     []string
	Counter    bool
}

// Gauges registers read, which answers the families' samples (in fams'
// order) at each scrape. It panics if a name is taken: families are
// registered once, at start.
func (r *Registry) Gauges(fams []Family, read func() [][]Sample) {
	if r == nil {
		return
	}
	c := &reader{read: read}
	for _, f := range fams {
		c.descs = append(c.descs, prometheus.NewDesc(f.Name, f.Help, f.Labels, nil))
		kind := prometheus.GaugeValue
		if f.Counter {
			kind = prometheus.CounterValue
		}
		c.kinds = append(c.kinds, kind)
	}
	r.reg.MustRegister(c)
}

// reader is a prometheus.Collector of values read from their owner.
type reader struct {
	descs []*prometheus.Desc
	kinds []prometheus.ValueType
	read  func() [][]Sample
}

func (c *reader) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *reader) Collect(ch chan<- prometheus.Metric) {
	for i, samples := range c.read() {
		if i >= len(c.descs) {
			break
		}
		for _, s := range samples {
			m, err := prometheus.NewConstMetric(c.descs[i], c.kinds[i], s.Value, s.Labels...)
			if err != nil {
				ch <- prometheus.NewInvalidMetric(c.descs[i], err)
				continue
			}
			ch <- m
		}
	}
}

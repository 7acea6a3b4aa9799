package controller

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// ptah's own metrics, served on the manager's /metrics beside
// controller-runtime's (controller_runtime_reconcile_total counts the
// reconciles, by controller and result).
var (
	plansPublished = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ptah_plans_published_total",
		Help: "Plans published, by resource kind.",
	}, []string{"kind"})
	appliesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ptah_applies_total",
		Help: "Applies accounted for, by resource kind and outcome (Succeeded, Failed, Unknown).",
	}, []string{"kind", "outcome"})
	blockedResources = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ptah_blocked_resources",
		Help: "Resources whose phase is Blocked, by kind and reason.",
	}, []string{"kind", "reason"})
)

func init() {
	metrics.Registry.MustRegister(plansPublished, appliesTotal, blockedResources)
}

// blocked tracks which resources are Blocked and why, for the gauge.
type blocked struct {
	mu      sync.Mutex
	reasons map[string]string // kind/namespace/name -> reason
}

var blockedNow = &blocked{reasons: map[string]string{}}

// set records the reason a resource is Blocked ("" when it is not) and
// brings the gauge up to date.
func (b *blocked) set(kind, key, reason string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := kind + "/" + key
	if b.reasons[k] == reason {
		return
	}
	if old, ok := b.reasons[k]; ok {
		blockedResources.WithLabelValues(kind, old).Dec()
		delete(b.reasons, k)
	}
	if reason != "" {
		b.reasons[k] = reason
		blockedResources.WithLabelValues(kind, reason).Inc()
	}
}

package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The database pool's block (issue 58): the daemon's pool is bounded
// (database.PoolMaxConnsDefault), and the locks' transactions, River and
// the exporter's reads share it, so what its bound costs is a figure to
// watch: how often, and how long, an acquire waited for a connection.

// PoolStat is what the pool says of itself (pgxpool.Stat), read at each
// scrape.
type PoolStat struct {
	// Max is the pool's bound; InUse and Idle its connections now.
	Max, InUse, Idle int32
	// Acquires counts the connections handed out; Waited those of them
	// that found no idle connection and waited for one (opened, or given
	// back by another), and WaitTime sums those waits.
	Acquires, Waited int64
	WaitTime         time.Duration
	// Opened counts the connections the pool opened.
	Opened int64
}

// poolCollector reads the pool's figures once per scrape.
type poolCollector struct {
	stat                                       func() PoolStat
	max, conns, acquires, waited, wait, opened *prometheus.Desc
}

// WatchPool registers, on reg, the pool's series, read from stat at each
// scrape.
func WatchPool(reg prometheus.Registerer, stat func() PoolStat) {
	reg.MustRegister(&poolCollector{
		stat:     stat,
		max:      prometheus.NewDesc("syncer_db_pool_max_connections", "The bound of the daemon's database pool.", nil, nil),
		conns:    prometheus.NewDesc("syncer_db_pool_connections", "Connections of the daemon's database pool, by state (in_use, idle).", []string{"state"}, nil),
		acquires: prometheus.NewDesc("syncer_db_pool_acquires_total", "Connections handed out by the daemon's database pool.", nil, nil),
		waited:   prometheus.NewDesc("syncer_db_pool_acquire_waits_total", "Acquires of the daemon's database pool that found no idle connection and waited for one.", nil, nil),
		wait:     prometheus.NewDesc("syncer_db_pool_acquire_wait_seconds_total", "Time the acquires that found no idle connection waited, summed.", nil, nil),
		opened:   prometheus.NewDesc("syncer_db_pool_opened_connections_total", "Connections the daemon's database pool opened.", nil, nil),
	})
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.max, c.conns, c.acquires, c.waited, c.wait, c.opened} {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stat()
	ch <- prometheus.MustNewConstMetric(c.max, prometheus.GaugeValue, float64(s.Max))
	ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, float64(s.InUse), "in_use")
	ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, float64(s.Idle), "idle")
	ch <- prometheus.MustNewConstMetric(c.acquires, prometheus.CounterValue, float64(s.Acquires))
	ch <- prometheus.MustNewConstMetric(c.waited, prometheus.CounterValue, float64(s.Waited))
	ch <- prometheus.MustNewConstMetric(c.wait, prometheus.CounterValue, s.WaitTime.Seconds())
	ch <- prometheus.MustNewConstMetric(c.opened, prometheus.CounterValue, float64(s.Opened))
}

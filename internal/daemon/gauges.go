package daemon

import (
	"context"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/outbox"
	"github.com/syncer-dev/syncer/internal/rows"
	"github.com/syncer-dev/syncer/internal/sources"
)

// gauges refreshes the database-wide gauges. They come from the database,
// not from this process, so every daemon reports the same values: aggregate
// them with max, not sum. Their cost does not grow with the table (no
// sequential scan of resources), since every daemon pays it.
func (d *Daemon) gauges(ctx context.Context) {
	t := newGrid(d.started.Add(phaseGauges+d.cfg.GaugeInterval), d.cfg.GaugeInterval)
	defer t.Stop()
	for {
		qctx, cancel := context.WithTimeout(ctx, d.cfg.GaugeInterval)
		if err := d.refreshGaugesSince(qctx, time.Now(), false); err != nil && ctx.Err() == nil {
			d.logger.DebugContext(ctx, "daemon: refresh gauges", slog.String("error", err.Error()))
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			t.Next()
		}
	}
}

// scrapeRefreshTimeout bounds the refresh a scrape waits for: past it, the
// scrape gets the values of the last refresh rather than none.
const scrapeRefreshTimeout = 2 * time.Second

// freshGauges serves next after refreshing the gauges, so a scrape reads
// the database as it is when the scrape arrives, not as the last tick left
// it: a gauge read every GaugeInterval would still count the keys a batch
// marked just after, and disagree with syncer status, which reads them
// then. Scrapes that arrive together share one refresh.
func (d *Daemon) freshGauges(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), scrapeRefreshTimeout)
		if err := d.refreshGaugesSince(ctx, time.Now(), true); err != nil && r.Context().Err() == nil {
			d.logger.DebugContext(ctx, "daemon: refresh gauges for a scrape; serving the last values", slog.String("error", err.Error()))
		}
		cancel()
		next.ServeHTTP(w, r)
	})
}

// tenantGaugesEvery is how often the gauges' tick reads the tenants'
// counts (a scrape reads them every time): that read decoded every
// tenant's facts, and at 10,000 idle tenants it was four tenths of the
// daemon's CPU when every 5 s tick read it (issue 43's idle row), and a
// fifth at every 30 s (issue 54); it now reads the facts of the tenants
// with rows and the others' holds only (breakerstore.ReadTenantsCounted).
const tenantGaugesEvery = 30 * time.Second

// refreshGaugesSince refreshes the gauges unless a refresh that started
// at or after since has already ended: one refresh at a time (the gauges'
// tick and the scrapes), and a caller that waited for another's refresh,
// begun after it asked, takes that one. A scrape asks for every gauge
// (scrape); the tick reads the tenants' counts every tenantGaugesEvery.
func (d *Daemon) refreshGaugesSince(ctx context.Context, since time.Time, scrape bool) error {
	select {
	case d.gaugesMu <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-d.gaugesMu }()
	if !d.gaugesAt.Before(since) {
		return nil
	}
	started := time.Now()
	tenants := scrape || started.Sub(d.tenantGaugesAt) >= tenantGaugesEvery
	if err := d.refreshGauges(ctx, tenants); err != nil {
		return err
	}
	d.gaugesAt = started
	if tenants {
		d.tenantGaugesAt = started
	}
	return nil
}

// refreshGauges reads the gauges once, the tenants' counts when tenants
// (they keep their last values otherwise); refreshGaugesSince holds
// gaugesMu around it.
func (d *Daemon) refreshGauges(ctx context.Context, tenants bool) error {
	m := d.metrics
	d.refreshCertificates(ctx, time.Now())
	// Not exact: that counts the whole resources table, and every daemon
	// asks every few seconds. The gauges' counts read the partial indexes,
	// which hold only the rows that are not synced.
	counts, err := rows.AllCounts(ctx, d.pool, false)
	if err != nil {
		return err
	}
	n, err := outbox.Pending(ctx, d.pool)
	if err != nil {
		return err
	}
	m.OutboxPending.Set(float64(n))
	// The push path's facts are shared: a standby daemon reports the state
	// the lock holder left, not only what it saw itself. Each destination's
	// come from its own namespace onto its own series.
	dests, srcs := d.running()
	for _, dest := range dests {
		st, err := breakerstore.ReadStateOf(ctx, d.pool, dest.namespace)
		if err != nil {
			return err
		}
		dest.metrics.SetBreakerState(int(st.Breaker.Current(time.Now())))
		dest.metrics.SetCredentialsRefused(st.Credentials.Refused)
		dest.metrics.SetMisconfigured(st.Configuration.Refused)
		dest.metrics.SetPaused(st.Hold.Paused)
	}
	// Every source this daemon exports is set alike: resources when the
	// default destination is configured, and the configured sources this
	// daemon's file names (another daemon's file may name others, and it
	// reports those). A source is stopped by its own error or by its
	// destination's facts, read once a destination (the facts' owner
	// decides).
	exported := exportedSources(dests, srcs)
	stops := stopsOf{d: d, read: map[string]bool{}}
	var tombstonesPending, tombstonesFailed int64
	for _, c := range counts {
		// Resources' tombstones have gauges of their own, whoever exports
		// it; the other kinds have none (0).
		tombstonesPending += c.TombstonesPending
		tombstonesFailed += c.TombstonesFailed
		if _, ok := exported[c.Source]; !ok {
			continue
		}
		stop, err := stops.of(ctx, c.Destination)
		if err != nil {
			return err
		}
		sourceError := ""
		if st := c.State; st != nil {
			sourceError = st.Error
			m.SetSourceUncaptured(c.Source, c.Destination, len(st.Uncaptured))
			if w := st.Warning(); w != d.warned[c.Source] {
				d.warned[c.Source] = w
				if w != "" {
					d.logger.WarnContext(ctx, "daemon: source not wholly captured", slog.String("source", c.Source), slog.String("warning", w))
				}
			}
		}
		m.SetSource(c.Source, c.Destination, c.Pending, c.Failed, c.OldestPending, sourceError != "" || stop)
		if src := sourceIn(srcs, c.Source); src != nil && src.Tenant != "" && tenants {
			if err := d.tenantGauges(ctx, c.Source, c.Destination); err != nil {
				return err
			}
		}
	}
	m.TombstonesPending.Set(float64(tombstonesPending))
	m.TombstonesFailed.Set(float64(tombstonesFailed))
	if err := d.verifyGauges(ctx); err != nil {
		return err
	}
	jobCounts, err := jobs.Counts(ctx, d.pool)
	if err != nil {
		return err
	}
	m.RiverJobs.Reset()
	for _, c := range jobCounts {
		m.RiverJobs.WithLabelValues(c.Kind, c.State).Set(float64(c.N))
	}
	return nil
}

// tenantGauges sets the counts of source's tenants: counts only, since a
// label per tenant would be a series per tenant.
func (d *Daemon) tenantGauges(ctx context.Context, source, destination string) error {
	backlog, err := sources.TenantsBacklog(ctx, d.pool, source, 0, "", nil)
	if err != nil {
		return err
	}
	pending := backlog.Pending()
	// The facts of the tenants with rows, and the others' holds: what the
	// counts tell apart (not every idle tenant's facts, decoded).
	facts, err := breakerstore.ReadTenantsCounted(ctx, d.pool, destination, slices.Collect(maps.Keys(pending)))
	if err != nil {
		return err
	}
	counts, unconnectedPending := breakerstore.CountTenants(facts, pending, time.Now())
	d.metrics.SetTenants(destination, source, counts, unconnectedPending)
	return nil
}

// exportedSources are the sources this daemon exports, each with its
// destination: resources when the default destination runs, and the
// sources of its file.
func exportedSources(dests []destinationState, file *config.Config) map[string]string {
	out := map[string]string{}
	for _, dest := range dests {
		if dest.name == rows.ResourcesDestination {
			out[rows.ResourcesName] = dest.name
		}
	}
	if file != nil {
		for _, s := range file.Sources {
			out[s.Name] = s.Destination
		}
	}
	return out
}

// sourceIn is file's source named name, nil without one (or without a
// file).
func sourceIn(file *config.Config, name string) *config.Source {
	if file == nil {
		return nil
	}
	return file.Source(name)
}

// stopsOf says whether a destination's facts stop its sources, reading
// each destination's once a refresh.
type stopsOf struct {
	d    *Daemon
	read map[string]bool
}

func (r *stopsOf) of(ctx context.Context, destination string) (bool, error) {
	stop, ok := r.read[destination]
	if !ok {
		facts, err := breakerstore.ReadStateOf(ctx, r.d.pool, breakerstore.DestinationNamespace(destination))
		if err != nil {
			return false, err
		}
		stop = facts.Stops(time.Now())
		r.read[destination] = stop
	}
	return stop, nil
}

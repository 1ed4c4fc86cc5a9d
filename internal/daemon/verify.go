package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/formats"
	"github.com/syncer-dev/syncer/internal/metrics"
	"github.com/syncer-dev/syncer/internal/sources"
	"github.com/syncer-dev/syncer/internal/verify"
)

// Background verification (docs/protocol.md section 11, verify_every):
// one loop per daemon (verify.Background) over the sources whose
// destination can be read back, each run under the source's verify lock,
// its lookups taking their turns from the destination's deliverer so
// verify and export share its rate limit. A source whose destination has
// no verify_every is verified only when someone asks ("Verify now").

// verifyJobs caches the sources as verify jobs for the file they were
// built from: the sources are resolved again only after a reload.
type verifyJobs struct {
	mu     sync.Mutex
	file   *config.Config
	dests  map[string]*destination
	jobs   []verify.Job
	logged map[string]bool
}

// jobs returns the verify jobs of what the daemon runs now.
func (d *Daemon) verifyJobs(ctx context.Context) ([]verify.Job, error) {
	d.mu.Lock()
	dests, file := d.dests, d.cfg.Sources
	d.mu.Unlock()
	v := &d.verify
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.jobs != nil && v.file == file && sameDests(v.dests, dests) {
		return v.jobs, nil
	}
	if v.logged == nil {
		v.logged = map[string]bool{}
	}
	out := []verify.Job{}
	if dest, ok := dests[metrics.DefaultDestination]; ok {
		src, err := verify.NewResources(verify.Range{})
		if err != nil {
			return nil, err
		}
		if j, ok := d.verifyJob(ctx, src, nil, dest, nil); ok {
			out = append(out, j)
		}
	}
	if file != nil {
		srcs, err := sources.Resolve(ctx, d.pool, file.SourceSpecs())
		if err != nil {
			return nil, fmt.Errorf("daemon: verify: %w", err)
		}
		for _, s := range srcs {
			dest, ok := dests[s.Destination]
			if !ok {
				continue
			}
			src, err := verify.NewConfigured(s, verify.Range{})
			if err != nil {
				return nil, fmt.Errorf("daemon: verify: source %s: %w", s.Name, err)
			}
			if j, ok := d.verifyJob(ctx, src, s, dest, file.Destination(s.Destination)); ok {
				out = append(out, j)
			}
		}
	}
	v.jobs, v.file, v.dests = out, file, dests
	return out, nil
}

func sameDests(a, b map[string]*destination) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// verifyJob is src's job on dest, with now, the destination's entry of
// the file as read last (nil for the default destination). When dest cannot be read back (its
// format has no read API, or it authenticates by an auth mapping) the job
// has no Reader and says why: a run asked for is refused with that, and a
// verify_every on it is logged once.
// ss is the configured source (nil for the resources); one with a tenant
// column on a destination with a tenants block is verified a tenant at a
// time (tenantVerify).
func (d *Daemon) verifyJob(ctx context.Context, src verify.Source, ss *sources.Source, dest *destination, now *config.Destination) (verify.Job, bool) {
	c := &d.cfg
	conf := dest.conf
	format := c.Format.Name
	every, heal := c.VerifyEvery, c.VerifyHeal
	if conf != nil {
		format = conf.Format.Name
	}
	if now != nil {
		// The file as it is now: a reload that changed only these kept
		// the destination built from the file before.
		every, heal = now.VerifyEvery, now.VerifyHeal
	}
	name := dest.state.name
	// The destination's own client: its URL, credentials (an auth
	// mapping's too), headers and TLS, as the export sends with.
	var block formats.ReadSettings
	if conf != nil {
		block = conf.Verify
	}
	rd, rerr := formats.Reader(format, block, &formats.Account{Client: dest.client, Source: src.Name()})
	var tv verify.Tenants
	if rerr == nil && conf != nil && conf.Tenants != nil {
		rd = nil
		if ss == nil || ss.Tenant == "" || dest.tenants == nil {
			rerr = fmt.Errorf("destination %s has a tenants block and source %s no tenant column: no account to read its rows from", name, src.Name())
		} else {
			tv = tenantVerify{src: ss, reg: dest.tenants, dest: conf}
		}
	}
	if rerr != nil {
		if every > 0 && !d.verify.logged[name] {
			d.verify.logged[name] = true
			d.logger.WarnContext(ctx, "daemon: verify_every is set but the destination cannot be read back: no background verification",
				slog.String("destination", name), slog.String("format", format), slog.String("error", rerr.Error()))
		}
		why := fmt.Sprintf("destination %s (format %s) cannot be read back by the daemons: %v", name, cmp.Or(format, "syncer"), rerr)
		return verify.Job{Source: src, Destination: name, Unreadable: why}, true
	}
	dcfg := c.Delivery.WithDefaults()
	lim := config.Limits{RateLimit: dcfg.RateLimit, RateBurst: dcfg.RateBurst, MaxInFlight: dcfg.MaxInFlight}
	if conf != nil {
		lim = conf.Limits(lim)
	}
	return verify.Job{Source: src, Reader: rd, Tenants: tv, Destination: name, Every: every, Heal: heal,
		Limit: lim.RateLimit, Burst: lim.RateBurst, Namespace: breakerstore.DestinationNamespace(name),
		Turn: dest.deliverer.Turn}, true
}

// verifyEnded counts a background run in the metrics.
func (d *Daemon) verifyEnded(j *verify.Job, res *verify.Result, err error) {
	result := "clean"
	switch {
	case errors.Is(err, verify.ErrInterrupted):
		result = "interrupted"
	case err != nil:
		result = "failed"
	case res.Drifted() > 0:
		result = "drift"
	}
	d.metrics.VerifyRan(j.Source.Name(), j.Destination, result)
}

// verifyGauges sets the drift gauges from every source's last finished
// run, as the database holds it: every daemon shows the same.
func (d *Daemon) verifyGauges(ctx context.Context) error {
	last, err := verify.LastRuns(ctx, d.pool)
	if err != nil || len(last) == 0 {
		return err
	}
	destOf := exportedSources(d.running())
	for _, name := range slices.Sorted(maps.Keys(last)) {
		l := last[name]
		dest, ok := destOf[name]
		if !ok || l.Counts == nil {
			continue
		}
		byKind := map[string]int64{}
		for k, n := range l.Counts.ByKind() {
			byKind[string(k)] = n
		}
		finished := 0.0
		if l.FinishedAt != nil {
			finished = float64(l.FinishedAt.Unix())
		}
		d.metrics.SetVerifyDrift(name, dest, byKind, finished)
	}
	return nil
}

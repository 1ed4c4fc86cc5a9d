package daemon

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/credentials"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/exporter"
	"github.com/syncer-dev/syncer/internal/formats"
	"github.com/syncer-dev/syncer/internal/metrics"
	"github.com/syncer-dev/syncer/internal/sources"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// The destinations and sources a daemon builds from its configuration:
// one list of destinations (the SYNCER_THIRDPARTY_* settings build the one
// named default, the file the others), and one list of sources, each with
// its destination.

// destinationState is where one destination's shared facts live and which
// series show them.
type destinationState struct {
	name, namespace string
	metrics         *metrics.Destination
}

// buildDestinations builds one client and deliverer per destination, with
// its URL, token, limits and its own shared facts, in one list: the
// SYNCER_THIRDPARTY_* settings build the destination named default
// (metrics.DefaultDestination, resources' own, whose facts keep the
// namespace they always had), the file's destinations the others.
func (d *Daemon) buildDestinations(installation string) (map[string]exporter.Destination, error) {
	c := &d.cfg
	dests := map[string]exporter.Destination{}
	if c.ThirdParty.URL != "" {
		dcfg := c.Delivery
		var err error
		if dcfg.Format, err = formats.New(&c.Format, installation); err != nil {
			return nil, fmt.Errorf("daemon: format: %w", err)
		}
		tcfg := c.ThirdParty
		if c.ThirdPartyTokenFile != "" {
			tok, err := d.creds.FromFile("SYNCER_THIRDPARTY_TOKEN_FILE", c.ThirdPartyTokenFile)
			if err != nil {
				return nil, err
			}
			tcfg.Token, tcfg.Auth = "", &credentials.Bearer{Token: tok}
		}
		deliverer, err := d.destination(&tcfg, &dcfg, breakerstore.DestinationNamespace(metrics.DefaultDestination), installation)
		if err != nil {
			return nil, err
		}
		dests[metrics.DefaultDestination], d.inFlight = deliverer, deliverer.MaxInFlight()
	}
	if c.Sources == nil {
		return dests, nil
	}
	for _, dest := range c.Sources.Destinations {
		if _, dup := dests[dest.Name]; dup {
			return nil, fmt.Errorf("daemon: destination %s: the name is the destination SYNCER_THIRDPARTY_URL configures; give the file's another name", dest.Name)
		}
		tcfg := c.ThirdParty
		tcfg.URL, tcfg.Token = dest.URL, string(dest.Token)
		tcfg.Headers = dest.Format.Header()
		setting, err := d.destinationCredentials(dest, &tcfg)
		if err != nil {
			return nil, fmt.Errorf("daemon: destination %s: %w", dest.Name, err)
		}
		spec := dest.Format.Spec()
		if file := dest.Format.SigningSecretFile; file != "" {
			sec, err := d.creds.FromFile("destination "+dest.Name+": signing_secret_file", file)
			if err != nil {
				return nil, fmt.Errorf("daemon: destination %s: %w", dest.Name, err)
			}
			spec.SigningSecretFunc = sec.Value
		}
		format, err := formats.New(spec, installation)
		if err != nil {
			return nil, fmt.Errorf("daemon: destination %s: %w", dest.Name, err)
		}
		dcfg := c.Delivery
		lim := dest.Limits(config.Limits{RateLimit: dcfg.RateLimit, RateBurst: dcfg.RateBurst, MaxInFlight: dcfg.MaxInFlight})
		dcfg.RateLimit, dcfg.RateBurst, dcfg.MaxInFlight = lim.RateLimit, lim.RateBurst, lim.MaxInFlight
		dcfg.Format = format
		dcfg.Name = dest.Name
		dcfg.CredentialsSetting = setting
		dcfg.URLSetting = "the url of destination " + dest.Name + " in SYNCER_CONFIG"
		deliverer, err := d.destination(&tcfg, &dcfg, breakerstore.DestinationNamespace(dest.Name), installation)
		if err != nil {
			return nil, fmt.Errorf("daemon: destination %s: %w", dest.Name, err)
		}
		dests[dest.Name] = deliverer
	}
	return dests, nil
}

// buildSources lists the sources this daemon exports, each with its
// destination: resources when the default destination is configured,
// and the configured sources (installed by migrate).
func (d *Daemon) buildSources(ctx context.Context, dests map[string]exporter.Destination) ([]exporter.Source, error) {
	c := &d.cfg
	var out []exporter.Source
	if dest, ok := dests[metrics.DefaultDestination]; ok {
		out = append(out, exporter.Resources(dest))
	}
	if c.Sources == nil {
		return out, nil
	}
	srcs, err := sources.Resolve(ctx, d.pool, c.Sources.SourceSpecs())
	if err != nil {
		return nil, err
	}
	for _, s := range srcs {
		bs := 0
		if conf := c.Sources.Source(s.Name); conf != nil {
			bs = conf.BatchSize
		}
		dest, ok := dests[s.Destination]
		if !ok {
			// Only default can be missing: the file names its own.
			return nil, fmt.Errorf("daemon: source %s: its destination %s is the one SYNCER_THIRDPARTY_URL configures, and it is not set", s.Name, s.Destination)
		}
		out = append(out, exporter.Source{Source: s, Destination: dest, BatchSize: bs})
	}
	return out, nil
}

// destination builds one destination: its client, and its deliverer with
// its own settings, its shared facts in its own namespace of syncer_state
// (so a daemon that takes the export over inherits them), its metrics
// under its name and its log lines naming it.
func (d *Daemon) destination(tcfg *thirdparty.Config, dcfg *delivery.Config, namespace, installation string) (*delivery.Deliverer, error) {
	t := *tcfg
	// Every request in flight keeps its connection for the next one.
	t.IdleConns = dcfg.MaxInFlight
	client, err := thirdparty.New(&t)
	if err != nil {
		return nil, err
	}
	d.clients = append(d.clients, client)
	store, err := breakerstore.New(d.pool, &breakerstore.Config{Namespace: namespace})
	if err != nil {
		return nil, err
	}
	c := *dcfg
	c.Name = cmp.Or(c.Name, metrics.DefaultDestination)
	c.Logger = d.logger.With(slog.String("destination", c.Name))
	c.Metrics, c.Installation = d.metrics.Destination(c.Name), installation
	deliverer, err := delivery.New(guarded{client}, breakerstore.NewShared(store, 0), &c)
	if err != nil {
		return nil, err
	}
	d.destinations = append(d.destinations, destinationState{name: c.Name, namespace: namespace, metrics: c.Metrics})
	return deliverer, nil
}

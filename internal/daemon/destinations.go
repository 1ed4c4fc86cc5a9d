package daemon

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/credentials"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/exporter"
	"github.com/syncer-dev/syncer/internal/formats"
	"github.com/syncer-dev/syncer/internal/formats/custom"
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

// destination is one destination as built: what pushes to it, and what
// the gauges and the certificate warning read of it. A reload keeps it
// whole while its configuration is unchanged (reload.go).
type destination struct {
	// conf is the file's entry it was built from; nil for the default
	// destination, which the flags build.
	conf      *config.Destination
	deliverer *delivery.Deliverer
	client    *thirdparty.Client
	state     destinationState
	// certs are its TLS files' certificates; nil without tls.
	certs *destinationCertificates
}

// buildDestinations builds one client and deliverer per destination, with
// its URL, token, limits and its own shared facts: the SYNCER_THIRDPARTY_*
// settings build the destination named default (metrics.DefaultDestination,
// resources' own, whose facts keep the namespace they always had), the
// destinations of file, the configuration file, the others. A destination of prev whose
// configuration is unchanged is kept as it is, with what its deliverer
// learned; fresh are those built anew, whose clients the caller closes
// when it gives them up.
func (d *Daemon) buildDestinations(installation string, file *config.Config, prev map[string]*destination) (dests map[string]*destination, fresh []*destination, err error) {
	c := &d.cfg
	dests = map[string]*destination{}
	defer func() {
		if err != nil {
			for _, f := range fresh {
				f.client.Close()
			}
		}
	}()
	if c.ThirdParty.URL != "" {
		if p := prev[metrics.DefaultDestination]; p != nil {
			dests[metrics.DefaultDestination] = p
		} else {
			def, err := d.defaultDestination(installation)
			if err != nil {
				return nil, fresh, err
			}
			dests[metrics.DefaultDestination] = def
			fresh = append(fresh, def)
		}
	}
	if file == nil {
		return dests, fresh, nil
	}
	for _, dest := range file.Destinations {
		if _, dup := dests[dest.Name]; dup {
			return nil, fresh, fmt.Errorf("daemon: destination %s: the name is the destination SYNCER_THIRDPARTY_URL configures; give the file's another name", dest.Name)
		}
		if p := prev[dest.Name]; p != nil && p.conf != nil && sameDestination(p.conf, dest) {
			dests[dest.Name] = p
			continue
		}
		built, err := d.fileDestination(dest, installation)
		if err != nil {
			return nil, fresh, fmt.Errorf("daemon: destination %s: %w", dest.Name, err)
		}
		dests[dest.Name] = built
		fresh = append(fresh, built)
	}
	return dests, fresh, nil
}

// sameDestination reports whether a and b configure a destination alike,
// wherever in the file each is written.
func sameDestination(a, b *config.Destination) bool {
	x, y := *a, *b
	x.Line, y.Line = 0, 0
	return reflect.DeepEqual(x, y)
}

// defaultDestination builds the destination the SYNCER_THIRDPARTY_*
// settings configure.
func (d *Daemon) defaultDestination(installation string) (*destination, error) {
	c := &d.cfg
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
	return d.destination(&tcfg, &dcfg, breakerstore.DestinationNamespace(metrics.DefaultDestination), installation)
}

// fileDestination builds one destination of the configuration file.
func (d *Daemon) fileDestination(dest *config.Destination, installation string) (*destination, error) {
	c := &d.cfg
	tcfg := c.ThirdParty
	tcfg.URL, tcfg.Token = dest.URL, string(dest.Token)
	tcfg.Headers = dest.Format.Header()
	setting, certs, err := d.destinationCredentials(dest, &tcfg)
	if err != nil {
		return nil, err
	}
	spec := dest.Format.Spec()
	if file := dest.Format.SigningSecretFile; file != "" {
		sec, err := d.creds.FromFile("destination "+dest.Name+": signing_secret_file", file)
		if err != nil {
			return nil, err
		}
		spec.SigningSecretFunc = sec.Value
	}
	format, err := formats.New(spec, installation)
	if err != nil {
		return nil, err
	}
	dcfg := c.Delivery
	lim := dest.Limits(config.Limits{RateLimit: dcfg.RateLimit, RateBurst: dcfg.RateBurst, MaxInFlight: dcfg.MaxInFlight})
	dcfg.RateLimit, dcfg.RateBurst, dcfg.MaxInFlight = lim.RateLimit, lim.RateBurst, lim.MaxInFlight
	dcfg.Format = format
	dcfg.Name = dest.Name
	dcfg.CredentialsSetting = setting
	dcfg.URLSetting = "the url of destination " + dest.Name + " in SYNCER_CONFIG"
	built, err := d.destination(&tcfg, &dcfg, breakerstore.DestinationNamespace(dest.Name), installation)
	if err != nil {
		return nil, err
	}
	built.conf, built.certs = dest, certs
	return built, nil
}

// buildSources lists the sources this daemon exports, each with its
// destination: resources when the default destination is configured,
// and the configured sources (installed by migrate).
func (d *Daemon) buildSources(ctx context.Context, file *config.Config, dests map[string]*destination) ([]exporter.Source, error) {
	var out []exporter.Source
	if dest, ok := dests[metrics.DefaultDestination]; ok {
		r := exporter.Resources(dest.deliverer)
		r.BodyTag = d.bodyTag(dest)
		out = append(out, r)
	}
	if file == nil {
		return out, nil
	}
	srcs, err := sources.Resolve(ctx, d.pool, file.SourceSpecs())
	if err != nil {
		return nil, err
	}
	for _, s := range srcs {
		bs := 0
		if conf := file.Source(s.Name); conf != nil {
			bs = conf.BatchSize
		}
		dest, ok := dests[s.Destination]
		if !ok {
			// Only default can be missing: the file names its own.
			return nil, fmt.Errorf("daemon: source %s: its destination %s is the one SYNCER_THIRDPARTY_URL configures, and it is not set", s.Name, s.Destination)
		}
		out = append(out, exporter.Source{Source: s, Destination: dest.deliverer, BatchSize: bs, BodyTag: d.bodyTag(dest)})
	}
	return out, nil
}

// destination builds one destination: its client, and its deliverer with
// its own settings, its shared facts in its own namespace of syncer_state
// (so a daemon that takes the export over inherits them), its metrics
// under its name and its log lines naming it.
func (d *Daemon) destination(tcfg *thirdparty.Config, dcfg *delivery.Config, namespace, installation string) (*destination, error) {
	t := *tcfg
	// Every request in flight keeps its connection for the next one.
	t.IdleConns = dcfg.MaxInFlight
	client, err := thirdparty.New(&t)
	if err != nil {
		return nil, err
	}
	store, err := breakerstore.New(d.pool, &breakerstore.Config{Namespace: namespace})
	if err != nil {
		client.Close()
		return nil, err
	}
	c := *dcfg
	c.Name = cmp.Or(c.Name, metrics.DefaultDestination)
	c.Logger = d.logger.With(slog.String("destination", c.Name))
	c.Metrics, c.Installation = d.metrics.Destination(c.Name), installation
	deliverer, err := delivery.New(guarded{client}, breakerstore.NewShared(store, 0), &c)
	if err != nil {
		client.Close()
		return nil, err
	}
	return &destination{deliverer: deliverer, client: client,
		state: destinationState{name: c.Name, namespace: namespace, metrics: c.Metrics}}, nil
}

// bodyTag names how dest renders a body, for the digests of bodies the
// third party accepted (exporter.Source.BodyTag): its URL and its format
// with the format's settings, hashed. Another URL is another store, and
// another format or setting another body, so a digest kept under the old
// tag never lets a version go unsent. Secrets are not in it (config.Secret
// marshals redacted); a destination whose settings do not marshal gets no
// tag, and skips nothing.
func (d *Daemon) bodyTag(dest *destination) string {
	if d.cfg.SendUnchanged {
		return ""
	}
	f := d.cfg.Format
	what := struct {
		URL, Format, EventSource, EventTypePrefix string
		Custom                                    custom.Config
		Headers                                   map[string]config.Secret `json:",omitempty"`
	}{URL: d.cfg.ThirdParty.URL, Format: f.Name, EventSource: f.EventSource, EventTypePrefix: f.EventTypePrefix, Custom: f.Custom}
	if c := dest.conf; c != nil {
		what.URL, what.Format, what.EventSource, what.EventTypePrefix = c.URL, c.Format.Name, c.Format.EventSource, c.Format.EventTypePrefix
		what.Custom, what.Headers = c.Format.Custom, c.Format.Headers
	}
	data, err := json.Marshal(what)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

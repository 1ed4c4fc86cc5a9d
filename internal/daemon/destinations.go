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
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/exporter"
	"github.com/syncer-dev/syncer/internal/formats"
	"github.com/syncer-dev/syncer/internal/metrics"
	"github.com/syncer-dev/syncer/internal/sources"
	"github.com/syncer-dev/syncer/internal/tenants"
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
	// tenants gives each tenant of a source with a tenant column its own
	// deliverer (exporter.TenantsOf); nil for the default destination.
	tenants *tenants.Registry
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
	// Background verification's settings are read from the file as it is
	// now (verify.go): a change of them rebuilds nothing of the export.
	x.VerifyEvery, y.VerifyEvery, x.VerifyHeal, y.VerifyHeal = 0, 0, false, false
	return reflect.DeepEqual(x, y)
}

// defaultDestination builds the destination the SYNCER_THIRDPARTY_*
// settings configure: one more entry, built by newDestination as the
// file's are, under the settings' own names.
func (d *Daemon) defaultDestination(installation string) (*destination, error) {
	c := &d.cfg
	dest := &config.Destination{Name: metrics.DefaultDestination, URL: c.ThirdParty.URL,
		Token: config.Secret(c.ThirdParty.Token), TokenFile: c.ThirdPartyTokenFile,
		Format: config.Format{Name: c.Format.Name, Settings: c.Format.Settings}}
	built, err := d.newDestination(dest, flagNames, installation)
	if err != nil {
		return nil, err
	}
	built.conf = nil // kept across reloads while the flags stand
	return built, nil
}

// fileDestination builds one destination of the configuration file.
func (d *Daemon) fileDestination(dest *config.Destination, installation string) (*destination, error) {
	return d.newDestination(dest, fileNames(dest.Name), installation)
}

// destinationNames are how a destination's settings are named in what
// the daemon logs and refuses: the file's fields, or the SYNCER_THIRDPARTY_*
// settings of the destination they configure.
type destinationNames struct {
	// credentials and url name the token and the URL (delivery's
	// CredentialsSetting and URLSetting); "" is delivery's default, the
	// SYNCER_THIRDPARTY_* names.
	credentials, url string
	// tokenFile names the token file, as credentials.Set labels it, and
	// tokenFileSetting as the log lines name it ("" for credentials).
	tokenFile        func(file string) string
	tokenFileSetting func(file string) string
	// secretFile names a format's secret file (a signing secret).
	secretFile func(s formats.Secret) string
	// format wraps a format's error.
	format string
}

// flagNames are the SYNCER_THIRDPARTY_* settings' names.
var flagNames = destinationNames{
	tokenFile:        func(string) string { return "SYNCER_THIRDPARTY_TOKEN_FILE" },
	tokenFileSetting: func(string) string { return "" },
	secretFile:       func(formats.Secret) string { return "SYNCER_THIRDPARTY_SIGNING_SECRET_FILE" },
	format:           "daemon: format: ",
}

// fileNames are the names of destination name's fields in SYNCER_CONFIG.
func fileNames(name string) destinationNames {
	return destinationNames{
		credentials:      "the token of destination " + name + " (token_env in SYNCER_CONFIG)",
		url:              "the url of destination " + name + " in SYNCER_CONFIG",
		tokenFile:        func(string) string { return "destination " + name + ": token_file" },
		tokenFileSetting: func(file string) string { return "the token file of destination " + name + " (" + file + ")" },
		secretFile:       func(s formats.Secret) string { return "destination " + name + ": " + s.Field + "_file" },
	}
}

// newDestination builds a destination, of the file or of the flags: its
// credentials, its format from the format's own settings, its limits.
func (d *Daemon) newDestination(dest *config.Destination, names destinationNames, installation string) (*destination, error) {
	c := &d.cfg
	tcfg := c.ThirdParty
	tcfg.URL, tcfg.Token = dest.URL, string(dest.Token)
	tcfg.Headers = dest.Format.Header()
	setting, certs, err := d.accounts().destinationCredentials(dest, names, &tcfg)
	if err != nil {
		return nil, err
	}
	format, err := d.format(dest.Format.Spec(), installation, names.secretFile)
	if err != nil {
		if names.format != "" {
			return nil, fmt.Errorf("%s%w", names.format, err)
		}
		return nil, err
	}
	dcfg := c.Delivery
	lim := dest.Limits(config.Limits{RateLimit: dcfg.RateLimit, RateBurst: dcfg.RateBurst, MaxInFlight: dcfg.MaxInFlight})
	dcfg.RateLimit, dcfg.RateBurst, dcfg.MaxInFlight = lim.RateLimit, lim.RateBurst, lim.MaxInFlight
	dcfg.Format = format
	dcfg.Name = dest.Name
	dcfg.CredentialsSetting = setting
	dcfg.URLSetting = names.url
	own := tcfg
	if own.URL == "" && dest.Tenants != nil {
		// Each tenant's row gives its URL: the destination's own client,
		// which holds its name and limits, sends nothing (its sources'
		// batches go to their tenants' deliverers).
		own.URL = "http://tenants-only.invalid"
	}
	built, err := d.destination(&own, &dcfg, breakerstore.DestinationNamespace(dest.Name), installation)
	if err != nil {
		return nil, err
	}
	built.conf, built.certs = dest, certs
	if dest.Name != metrics.DefaultDestination {
		// The tenants' deliverers count in the destination's series
		// (the registry gives each the shared view): dcfg, built
		// before the destination's own deliverer, has none yet, and a
		// tenant's requests, 429s and latencies went uncounted.
		dcfg.Metrics = built.state.metrics
		if built.tenants, err = d.accounts().tenantRegistry(dest, &tcfg, &dcfg, installation, false); err != nil {
			built.client.Close()
			return nil, err
		}
	}
	return built, nil
}

// format builds a destination's format from its own settings, the same
// way for the destination SYNCER_THIRDPARTY_* configures and for the
// file's: a secret read from a file (a signing secret) is read again when
// the file changes, as a token file is; label names such a file in the
// credentials' messages.
func (d *Daemon) format(spec *formats.Spec, installation string, label func(formats.Secret) string) (formats.Format, error) {
	return formats.Build(spec, &formats.Env{Installation: installation,
		Secret: func(s formats.Secret) (func() string, error) {
			sec, err := d.creds.FromFile(label(s), s.File)
			if err != nil {
				return nil, err
			}
			return sec.Value, nil
		}})
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
		src := exporter.Configured(s, dest.deliverer)
		if s.Tenant != "" {
			if dest.tenants == nil {
				return nil, fmt.Errorf("daemon: source %s has a tenant column: its destination %s must be one of the file's destinations", s.Name, s.Destination)
			}
			src.Tenants = exporter.TenantsOf(dest.tenants)
		}
		src.BatchSize = bs
		src.BodyTag = d.bodyTag(dest)
		out = append(out, src)
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
	t.IdleConns = dcfg.WithDefaults().MaxInFlight
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
// tag never lets a version go unsent. Secrets are not in it: a format's
// secret marshals redacted (setting.Secret), and headers, no part of a
// body, are left out. A destination whose settings do not marshal gets
// no tag, and skips nothing.
func (d *Daemon) bodyTag(dest *destination) string {
	if d.cfg.SendUnchanged {
		return ""
	}
	f := d.cfg.Format
	what := struct {
		URL, Format string
		Settings    formats.Settings
	}{URL: d.cfg.ThirdParty.URL, Format: f.Name, Settings: f.Settings}
	if c := dest.conf; c != nil {
		what.URL, what.Format, what.Settings = c.URL, c.Format.Name, c.Format.Settings
	}
	data, err := json.Marshal(what)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

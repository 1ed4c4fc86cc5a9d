package daemon

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/credentials"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// Reload makes every secret and certificate file of the destinations be
// read again at its next use, as SIGHUP asks.
func (d *Daemon) Reload() {
	d.creds.Reload()
	d.logger.Info("daemon: SIGHUP: every secret and certificate file is read again at its next use")
}

// secret builds a credentials.Secret from where the file says it is.
func (a *accounts) secret(dest, field string, ref config.SecretRef) (*credentials.Secret, error) {
	name := fmt.Sprintf("destination %s: %s", dest, field)
	if ref.File != "" {
		return a.creds.FromFile(name+"_file", ref.File)
	}
	return a.creds.FromEnv(name+"_env", ref.Env, os.Getenv)
}

// destinationCredentials sets a destination's Authorization
// and TLS on tcfg: auth's type, or a token_file read again when it
// changes; tls's files, checked now. It returns what the log lines name as
// the setting to fix, and the certificates of its TLS files (nil without).
func (a *accounts) destinationCredentials(dest *config.Destination, names destinationNames, tcfg *thirdparty.Config) (setting string, certs *destinationCertificates, err error) {
	setting = names.credentials
	if dest.TokenEnv != "" {
		setting = dest.TokenEnv
	}
	if t := dest.TLS; t != nil {
		tlsCfg, err := a.creds.TLS("destination "+dest.Name+": tls", credentials.TLSFiles{
			CAFile: t.CAFile, CAOnly: t.CAOnly, CertFile: t.CertFile, KeyFile: t.KeyFile,
			ServerName: t.ServerName, MinVersion: t.MinVersion,
		})
		if err != nil {
			return "", nil, err
		}
		tcfg.TLS = tlsCfg.Config()
		store, err := breakerstore.New(a.pool, &breakerstore.Config{Namespace: breakerstore.DestinationNamespace(dest.Name)})
		if err != nil {
			return "", nil, err
		}
		certs = &destinationCertificates{name: dest.Name, tls: tlsCfg, store: store}
	}
	auth := dest.Auth
	switch {
	case auth == nil && dest.TokenFile != "":
		tok, err := a.creds.FromFile(names.tokenFile(dest.TokenFile), dest.TokenFile)
		if err != nil {
			return "", nil, err
		}
		tcfg.Token, tcfg.Auth = "", &credentials.Bearer{Token: tok}
		setting = names.tokenFileSetting(dest.TokenFile)
	case auth == nil:
	case auth.Type == config.AuthBearer:
		tok, err := a.secret(dest.Name, "auth.token", auth.Token)
		if err != nil {
			return "", nil, err
		}
		tcfg.Token, tcfg.Auth = "", &credentials.Bearer{Token: tok}
		setting = "auth.token of destination " + dest.Name
	case auth.Type == config.AuthBasic:
		user, err := a.secret(dest.Name, "auth.username", auth.Username)
		if err != nil {
			return "", nil, err
		}
		pass, err := a.secret(dest.Name, "auth.password", auth.Password)
		if err != nil {
			return "", nil, err
		}
		tcfg.Token, tcfg.Auth = "", &credentials.Basic{Username: user, Password: pass}
		setting = "auth.username and auth.password of destination " + dest.Name
	case auth.Type == config.AuthOAuth2:
		id, err := a.secret(dest.Name, "auth.client_id", auth.ClientID)
		if err != nil {
			return "", nil, err
		}
		secret, err := a.secret(dest.Name, "auth.client_secret", auth.ClientSecret)
		if err != nil {
			return "", nil, err
		}
		// The token endpoint is reached with the destination's TLS: an
		// identity provider behind the same private CA is common.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		if tcfg.TLS != nil {
			tr.TLSClientConfig = tcfg.TLS
		}
		o, err := credentials.NewOAuth2(credentials.OAuth2Config{
			TokenURL: auth.TokenURL, ClientID: id, ClientSecret: secret, Scopes: auth.Scopes, Params: auth.Params,
			HTTPClient: &http.Client{Transport: tr, Timeout: credentials.TokenTimeoutDefault},
		})
		if err != nil {
			return "", nil, err
		}
		tcfg.Token, tcfg.Auth = "", o
		setting = "auth (oauth2_client_credentials: client_id, client_secret, token_url) of destination " + dest.Name
	}
	return setting, certs, nil
}

// destinationCertificates are a destination's certificates, for the
// expiry gauge and the warning.
type destinationCertificates struct {
	name    string
	tls     *credentials.TLS
	store   *breakerstore.Store
	written breakerstore.Certificates
}

// refreshCertificates sets each destination's earliest certificate expiry
// and warns once a day-long stretch of a certificate that ends within
// ExpiryWarningDefault.
func (d *Daemon) refreshCertificates(ctx context.Context, now time.Time) {
	for _, dc := range d.certificatesNow() {
		ex := dc.tls.Expiries()
		if len(ex) == 0 {
			continue
		}
		d.metrics.SetCertificateExpiry(dc.name, ex[0].NotAfter)
		// status reads it from the database, as every fact of a
		// destination; written when it changed.
		if dc.written.What != ex[0].What || !dc.written.NotAfter.Equal(ex[0].NotAfter) {
			c := breakerstore.Certificates{What: ex[0].What, NotAfter: ex[0].NotAfter}
			if err := dc.store.SetCertificates(ctx, c); err == nil {
				dc.written = c
			}
		}
		if left := ex[0].NotAfter.Sub(now); left < credentials.ExpiryWarningDefault {
			key := "certificate:" + dc.name
			msg := fmt.Sprintf("%s expires %s", ex[0].What, ex[0].NotAfter.Format(time.RFC3339))
			if d.warned[key] != msg {
				d.warned[key] = msg
				d.logger.Warn("daemon: a certificate of a destination expires within 14 days: replace the file (it is read again when it changes)",
					"destination", dc.name, "certificate", ex[0].What, "not_after", ex[0].NotAfter.Format(time.RFC3339), "left", left.Round(time.Hour).String())
			}
		}
	}
}

package tenants

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/credentials"
	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// build makes tenant's deliverer from the destination's settings and its
// row (nil without a query).
func (r *Registry) build(e *entry, conn *connection) (*delivery.Deliverer, *refreshGrant, error) {
	tenant := e.tenant
	tcfg, grant, err := r.clientConfig(tenant, conn, e.tokens)
	if err != nil {
		return nil, nil, err
	}
	client, err := thirdparty.New(tcfg)
	if err != nil {
		return nil, nil, err
	}
	var c delivery.Client = client
	if r.cfg.Wrap != nil {
		c = r.cfg.Wrap(c)
	}
	c = watched{Client: c, e: e}
	dcfg := r.cfg.Delivery
	dcfg.Name = cmp.Or(dcfg.Name, r.cfg.Destination)
	dcfg.Metrics = dcfg.Metrics.Shared()
	dcfg.Logger = r.logger.With(slog.String("tenant", tenant))
	dcfg.CredentialsSetting = "the credentials of tenant " + tenant + " (destination " + r.cfg.Destination + ", tenants.query)"
	dcfg.URLSetting = "the url of tenant " + tenant + " (destination " + r.cfg.Destination + ")"
	if conn != nil {
		// Its own limits, from its row (contract section 10.1): a
		// change in the row is a new deliverer at the next read.
		conn.limits.apply(&dcfg)
	}
	if b, ok := dcfg.Format.(Binder); ok {
		var extra map[string]any
		if conn != nil {
			extra = conn.extra
		}
		dcfg.Format = b.ForTenant(tenant, extra)
	}
	store, err := breakerstore.New(r.cfg.Pool, &breakerstore.Config{Namespace: r.namespace(tenant)})
	if err != nil {
		return nil, nil, err
	}
	d, err := delivery.New(c, breakerstore.NewShared(store, 0), &dcfg)
	if err != nil {
		return nil, nil, err
	}
	return d, grant, nil
}

// clientConfig is tenant's client settings: the destination's, with the
// URL, headers and credentials of its connection row (nil without a
// query), and the refresh grant when the row gives a refresh token.
// mem is the tenant's refresh tokens known to this process.
func (r *Registry) clientConfig(tenant string, conn *connection, mem *tokenMemory) (*thirdparty.Config, *refreshGrant, error) {
	if reason := Invalid(tenant); reason != "" {
		return nil, nil, fmt.Errorf("%w: %s", ErrInvalid, reason)
	}
	tcfg := r.cfg.ThirdParty
	tcfg.HTTPClient = r.http
	tcfg.URL = strings.ReplaceAll(tcfg.URL, "{tenant}", url.PathEscape(tenant))
	var grant *refreshGrant
	if conn != nil {
		if conn.url != "" {
			tcfg.URL = conn.url
		}
		if tcfg.URL == "" {
			return nil, nil, errors.New("tenants.query: the row gives no url, and the destination has none")
		}
		if len(conn.headers) > 0 {
			h := tcfg.Headers.Clone()
			if h == nil {
				h = http.Header{}
			}
			for k, v := range conn.headers {
				h.Set(k, v)
			}
			tcfg.Headers = h
		}
		auth, g, err := r.credentials(tenant, conn, mem)
		if err != nil {
			return nil, nil, err
		}
		if auth != nil {
			tcfg.Token, tcfg.Auth, grant = "", auth, g
		}
	}
	return &tcfg, grant, nil
}

// credentials are the row's: a refresh token, a client id and secret (at
// the token endpoint), a bearer token, or basic auth; nil when the row
// gives none (the destination's stand).
func (r *Registry) credentials(tenant string, conn *connection, mem *tokenMemory) (thirdparty.Authorizer, *refreshGrant, error) {
	name := func(field string) string {
		return "destination " + r.cfg.Destination + ": tenant " + tenant + ": " + field
	}
	tokenURL := strings.ReplaceAll(r.cfg.TokenURL, "{tenant}", url.PathEscape(tenant))
	switch {
	case conn.refreshToken != "":
		if tokenURL == "" {
			return nil, nil, errors.New("tenants.query: column refresh_token needs auth.token_url on the destination")
		}
		id, secret := conn.clientID, conn.clientSecret
		if id == "" && secret == "" {
			id, secret = r.cfg.ClientID.Value(), r.cfg.ClientSecret.Value()
		}
		query, timeout := r.cfg.Settings.Query, r.timeout()
		g := &refreshGrant{
			conf: oauth2Config(id, secret, tokenURL, r.cfg.Scopes), client: r.tokenClient(), endpoint: endpointText(tokenURL),
			tenant: tenant, given: conn.refreshToken, pool: r.cfg.Pool, lockKey: refreshLockKey(r.cfg.Destination, tenant),
			stored: func(ctx context.Context, q database.Querier) (string, error) {
				c, err := readInTx(ctx, q, query, tenant, timeout)
				if err != nil || c == nil {
					return "", err
				}
				return c.refreshToken, nil
			},
			onRefresh: r.cfg.Settings.OnRefresh, logger: r.logger.With(slog.String("tenant", tenant)), mem: mem, later: r.later,
			claimKey: r.namespace(tenant) + claimSuffix,
		}
		return g, g, nil
	case conn.clientID != "":
		if tokenURL == "" {
			return nil, nil, errors.New("tenants.query: columns client_id and client_secret need auth.token_url on the destination")
		}
		o, err := credentials.NewOAuth2(credentials.OAuth2Config{
			TokenURL: tokenURL, ClientID: credentials.Literal(name("client_id"), conn.clientID),
			ClientSecret: credentials.Literal(name("client_secret"), conn.clientSecret),
			Scopes:       r.cfg.Scopes, Params: r.cfg.Params, HTTPClient: r.tokenClient(),
		})
		if err != nil {
			return nil, nil, err
		}
		return o, nil, nil
	case conn.token != "":
		if strings.ContainsAny(conn.token, "\r\n") {
			return nil, nil, errors.New("tenants.query: column token must be one line")
		}
		return &credentials.Bearer{Token: credentials.Literal(name("token"), conn.token)}, nil, nil
	case conn.username != "":
		return &credentials.Basic{Username: credentials.Literal(name("username"), conn.username),
			Password: credentials.Literal(name("password"), conn.password)}, nil, nil
	}
	return nil, nil, nil
}

// tokenClient reaches token endpoints: the tenants' transport (an
// identity provider behind the destination's private CA is common),
// bounded per request.
func (r *Registry) tokenClient() *http.Client {
	return &http.Client{Transport: r.http.Transport, Timeout: credentials.TokenTimeoutDefault}
}

// watched tells the registry when the third party refused a tenant's
// credentials (after one fresh token): its row is read again at once.
type watched struct {
	delivery.Client
	e *entry
}

func (w watched) Send(ctx context.Context, key string, req *thirdparty.Request, read func(*thirdparty.Answer) (*thirdparty.Result, error)) (*thirdparty.Result, error) {
	res, err := w.Client.Send(ctx, key, req, read)
	var tpErr *thirdparty.Error
	if err != nil && w.e != nil && errors.As(err, &tpErr) && tpErr.AuthRefused() {
		w.e.stale.Store(true)
	}
	return res, err
}

// refused reports whether d holds because the third party refused its
// credentials.
func refused(d *delivery.Deliverer, now time.Time) bool {
	_, err := d.Ready(now)
	return errors.Is(err, delivery.ErrCredentials)
}

package tenants

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/oauth2"

	"github.com/syncer-dev/syncer/internal/credentials"
	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/redact"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// refreshGrant is a tenant's OAuth2 refresh_token grant (RFC 6749 section
// 6): an access token asked of the token endpoint with the tenant's
// refresh token, shared by the tenant's requests, asked again shortly
// before it expires and after a 401 (Refresh).
//
// A token endpoint may rotate the refresh token at each grant, and some
// (Auth0, Okta) revoke the whole family when a rotated-away token is used
// again. So each grant is made inside a transaction that holds the
// tenant's refresh lock (refreshLockKey): it reads the token stored then
// (the tenants query, run again), spends it, and stores the rotated one
// with on_refresh before the lock goes, in the same transaction. Every
// syncer process (the exporting daemons, verify, probes) takes the same
// lock, so none spends a token another already rotated away from; and a
// claim committed before the ask (claim.go) holds the others off when
// the database ends the grant's session, and the lock with it, mid-ask.
type refreshGrant struct {
	conf     oauth2.Config
	client   *http.Client
	endpoint string // the token URL without secrets, for errors
	tenant   string
	// given is the refresh token of the row the grant was built from,
	// scrubbed like the others.
	given   string
	pool    *pgxpool.Pool
	lockKey int32
	// stored reads the tenant's refresh token as stored now: "" when the
	// row is gone or gives none.
	stored func(ctx context.Context, q database.Querier) (string, error)
	// onRefresh stores a rotated refresh token ($1 tenant, $2 token); ""
	// keeps it in memory only.
	onRefresh string
	logger    *slog.Logger
	// mem is what this process knows of the tenant's refresh tokens,
	// shared by every grant of the tenant in a registry.
	mem *tokenMemory
	// later retries the stores of rotated tokens that failed
	// (storeLater); nil stores none later.
	later *laterStores
	// claimKey is the syncer_state key of the tenant's claim (claim.go).
	claimKey string

	// cache holds the access token, as credentials.OAuth2's does.
	cache credentials.TokenCache
}

var (
	_ thirdparty.Authorizer = (*refreshGrant)(nil)
	_ thirdparty.Refresher  = (*refreshGrant)(nil)
)

// refreshLockClass is the first key of every tenant's refresh lock
// (pg_advisory_xact_lock(int, int)). PostgreSQL keeps the two-int keys
// apart from the bigint keys of syncer's other locks, so a grant never
// waits on those, nor they on it.
const refreshLockClass int32 = 0x73796e72 // "synr"

// RefreshLock is the two keys of tenant's refresh lock at destination, for
// pg_advisory_xact_lock(int, int): an application that writes a new
// refresh token to a tenant's row (the customer connected again) may take
// it around its write, so that no grant of syncer's reads the row before
// the write and spends the old token after it (docs/design.md, "A refresh
// token spent once").
func RefreshLock(destination, tenant string) (int32, int32) {
	return refreshLockClass, refreshLockKey(destination, tenant)
}

// refreshLockKey is the second key of tenant's refresh lock at
// destination. Two tenants whose keys collide only take turns at their
// grants.
func refreshLockKey(destination, tenant string) int32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(destination))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(tenant))
	return int32(h.Sum32())
}

// grantTimeout bounds one grant's transaction once the token endpoint is
// asked: the lock's wait is the caller's, but a grant started is finished
// (and its rotated token stored) even when the request that asked is
// cancelled, since the endpoint no longer takes the old token.
const grantTimeout = credentials.TokenTimeoutDefault + storeTimeout

// storeTimeout bounds one run of on_refresh.
const storeTimeout = 10 * time.Second

// Authorization returns "Bearer <token>", asking the endpoint first when
// there is no token or it is about to expire (credentials.TokenCache, the
// cache credentials.OAuth2 holds its token in too).
func (g *refreshGrant) Authorization(ctx context.Context) (string, error) {
	return g.cache.Authorization(ctx, g.grant)
}

// errNoRefreshToken is a grant's answer when the row is gone or no longer
// gives a refresh token: the registry's next read of it tells the tenant's
// state.
var errNoRefreshToken = errors.New("tenants: the tenant's connection row no longer gives a refresh token")

// grant claims the tenant (claim), then asks the endpoint for an access
// token under the tenant's refresh lock, with the token stored then, and
// stores a rotated one, and releases the claim, before the lock goes. After invalid_grant it asks once more with the token stored
// at that moment, if another was stored meanwhile (by a process outside
// the lock: the application, an older syncer). When the rotated token
// could not be stored (on_refresh failed, the connection dropped, the
// commit failed), its store is retried on connections of its own until
// it succeeds (keepStoring); meanwhile this process sends with it.
func (g *refreshGrant) grant(ctx context.Context) (*oauth2.Token, error) {
	// A connection is the caller's to wait for; the transaction, once
	// begun, outlives the caller (grantTimeout).
	conn, err := g.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("tenants: a connection for the tenant's refresh grant: %w", err)
	}
	defer conn.Release()
	// The claim outlives a session the database ends mid-grant (claim.go);
	// one left behind is released by keepStoring.
	g.mem.beginGrant()
	released := false
	defer func() {
		g.mem.endGrant(released)
		if !released {
			g.storeLater()
		}
	}()
	if err := g.claim(ctx, conn); err != nil {
		return nil, err
	}
	txCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grantTimeout)
	defer cancel()
	var (
		tok          *oauth2.Token
		askErr       error
		used, next   string
		storedByTx   bool
		askedAtLeast bool
	)
	err = pgx.BeginFunc(txCtx, conn, func(tx pgx.Tx) error {
		// The wait is the caller's to cancel: nothing is spent yet.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, $2)`, refreshLockClass, g.lockKey); err != nil {
			return fmt.Errorf("tenants: take the tenant's refresh lock: %w", err)
		}
		var (
			err     error
			fromRow bool
		)
		if used, fromRow, err = g.current(ctx, tx); err != nil {
			return err
		}
		askedAtLeast = true
		var answered string
		tok, answered, askErr = g.ask(txCtx, used)
		if invalidGrant(askErr) {
			if again, againFromRow, err := g.current(txCtx, tx); err == nil && again != used {
				used, fromRow = again, againFromRow
				tok, answered, askErr = g.ask(txCtx, used)
			}
		}
		next = used
		if askErr == nil {
			answered = tok.RefreshToken
		}
		if answered == "" || answered == used {
			if askErr == nil {
				g.mem.kept(used, fromRow)
			}
			return g.unclaim(txCtx, tx) // nothing to store; the commit frees the lock
		}
		// The endpoint rotated the token, even if its answer is otherwise
		// unusable: the old one is dead whatever becomes of this
		// transaction. Remembered before the lock goes, so that no store
		// of this process puts a spent token back.
		next = answered
		g.mem.rotated(used, next)
		storedByTx = g.store(txCtx, tx, next)
		return g.unclaim(txCtx, tx)
	})
	released = err == nil
	switch {
	case !askedAtLeast || (askErr == nil && tok == nil):
		return nil, err
	case next == used && askErr != nil:
		return nil, g.tokenError(askErr, used)
	case next == used:
		return tok, nil
	}
	g.settle(ctx, err, storedByTx, used, next)
	if askErr != nil {
		return nil, g.tokenError(askErr, used, next)
	}
	return tok, nil
}

// settle follows up the store of the token the endpoint rotated to, next,
// once the grant's transaction is over (txErr its failure): marked
// stored, or retried behind the grant.
func (g *refreshGrant) settle(ctx context.Context, txErr error, storedByTx bool, used, next string) {
	err := txErr
	switch {
	case err == nil && storedByTx:
		g.mem.stored(next)
	case g.onRefresh == "":
		// Nothing can store it: held in memory (store logged why).
	default:
		if err != nil && storedByTx {
			// on_refresh ran, but the commit that kept it failed.
			g.logger.WarnContext(ctx, "tenants: the token endpoint rotated the tenant's refresh token and the transaction storing it failed; storing it is retried, and this process sends with it meanwhile",
				slog.String("error", g.scrub(err.Error(), used, next)))
		}
		g.storeLater()
	}
}

// current is the refresh token to spend, and whether it is the one
// stored: the one stored now, unless this process already spent that one
// and holds the token it was rotated to.
func (g *refreshGrant) current(ctx context.Context, q database.Querier) (string, bool, error) {
	stored, err := g.stored(ctx, q)
	if err != nil {
		return "", false, err
	}
	if stored == "" {
		return "", false, errNoRefreshToken
	}
	used, fromRow := g.mem.choose(stored)
	return used, fromRow, nil
}

// ask is one grant at the endpoint with refresh. answered is the
// refresh_token of the endpoint's 2xx answer, read before the OAuth2
// client judged it (rotated.go): the token rotated to even when the
// answer is refused (err), "" when the answer carried none.
func (g *refreshGrant) ask(ctx context.Context, refresh string) (tok *oauth2.Token, answered string, err error) {
	client := *g.client
	reader := &rotatedReader{base: client.Transport}
	if reader.base == nil {
		reader.base = http.DefaultTransport
	}
	client.Transport = reader
	tok, err = g.conf.TokenSource(context.WithValue(ctx, oauth2.HTTPClient, &client), &oauth2.Token{RefreshToken: refresh}).Token()
	answered, ok := reader.answered()
	var re *oauth2.RetrieveError
	if err != nil && ok && !errors.As(err, &re) {
		// A 2xx the client refused: no access token, or one it could
		// not read. Its own words say nothing of which token was spent.
		err = fmt.Errorf("%w (%w)", errUnusableAnswer, err)
	}
	return tok, answered, err
}

// errUnusableAnswer is an endpoint's 2xx answer to a grant that gives no
// access token the client can use ("server response missing
// access_token"): transient, since the next grant may be answered well.
var errUnusableAnswer = errors.New("answered 2xx without a usable access token")

// store runs on_refresh with the rotated token in a savepoint of the
// grant's transaction, so that its failure keeps the lock and the grant;
// it reports whether the token is stored. Without on_refresh the token
// stays in this process's memory: logged at error once, since a restart or
// another process would spend the old one.
func (g *refreshGrant) store(ctx context.Context, tx pgx.Tx, refresh string) bool {
	if g.onRefresh == "" {
		if g.mem.warnOnce() {
			g.logger.ErrorContext(ctx, "tenants: the token endpoint rotates the tenant's refresh token and the destination has no tenants.on_refresh: the new token is held in this process's memory only; a restart or another daemon would spend the old one, which such an endpoint refuses (and may revoke the tenant's every token for); set tenants.on_refresh")
		}
		return false
	}
	sctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	// The savepoint's own statements run under the grant's context: a
	// rollback to it must still go after on_refresh ran out of time.
	err := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
		_, err := sp.Exec(sctx, g.onRefresh, g.tenant, refresh)
		return err
	})
	if err != nil {
		text := redact.Scrub(pgText(err, 0).Error(), refresh)
		g.logger.WarnContext(ctx, "tenants: the token endpoint rotated the tenant's refresh token and on_refresh failed to store it; storing it is retried, and this process sends with it meanwhile",
			slog.String("error", "tenants.on_refresh: "+g.scrub(text)))
		return false
	}
	g.logger.DebugContext(ctx, "tenants: the token endpoint rotated the tenant's refresh token; on_refresh stored it")
	return true
}

// invalidGrant reports the endpoint's refusal of a refresh token.
func invalidGrant(err error) bool {
	var re *oauth2.RetrieveError
	return errors.As(err, &re) && re.ErrorCode == "invalid_grant"
}

// Refresh drops the token header carried after a 401: the next request
// asks the endpoint again.
func (g *refreshGrant) Refresh(header string) { g.cache.Refresh(header) }

// Secrets are the values to scrub from whatever the third party echoes:
// the refresh tokens, the client secret and the base64 of the Basic header
// it goes to the token endpoint in (redact.Basic), the access token.
func (g *refreshGrant) Secrets() []string {
	out := append(g.mem.tokens(), g.given, g.conf.ClientSecret)
	out = append(out, redact.Basic(g.conf.ClientID, g.conf.ClientSecret)...)
	if tok := g.cache.Token(); tok != "" {
		out = append(out, tok)
	}
	return out
}

// scrub removes every refresh token known, those in also, and the client
// secret from s.
func (g *refreshGrant) scrub(s string, also ...string) string {
	for _, secret := range append(append(g.mem.tokens(), g.given, g.conf.ClientSecret), also...) {
		if len(secret) >= 4 {
			s = strings.ReplaceAll(s, secret, "[redacted]")
		}
	}
	return s
}

// tokenError is the endpoint's failure in its own words, secrets
// scrubbed: a refusal (400, 401, 403) refuses the tenant's credentials,
// named for what was refused (the refresh token, or the client that
// presented it); anything else is transient.
func (g *refreshGrant) tokenError(err error, spent ...string) error {
	te := &credentials.TokenError{Endpoint: g.endpoint, Refused: credentials.RefusedRefreshToken}
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		if re.Response != nil {
			te.Status = re.Response.StatusCode
		}
		if re.ErrorCode == "invalid_client" || re.ErrorCode == "unauthorized_client" || (re.ErrorCode == "" && te.Status == http.StatusUnauthorized) {
			te.Refused = credentials.RefusedClient
		}
		parts := []string{fmt.Sprintf("answered %d", te.Status)}
		if re.ErrorCode != "" {
			parts = append(parts, re.ErrorCode)
		}
		if re.ErrorDescription != "" {
			parts = append(parts, re.ErrorDescription)
		}
		te.Text = strings.Join(parts, ": ")
	} else {
		te.Text = strings.ReplaceAll(err.Error(), g.conf.Endpoint.TokenURL, g.endpoint)
	}
	if errors.Is(err, errUnusableAnswer) && len(spent) > 1 {
		te.Text += "; the refresh token it rotated to is kept"
	}
	te.Text = g.scrub(te.Text, spent...)
	if len(te.Text) > 512 {
		te.Text = te.Text[:512] + "…"
	}
	return te
}

// endpointText is a token URL as errors may show it: scheme, host and
// path.
func endpointText(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "[unparseable URL]"
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
}

// oauth2Config is the refresh grant's client: its id and secret in the
// HTTP basic header, as credentials.OAuth2 sends them, or in the form
// when there is no client secret.
func oauth2Config(id, secret, tokenURL string, scopes []string) oauth2.Config {
	return oauth2.Config{ClientID: id, ClientSecret: secret, Scopes: scopes,
		Endpoint: oauth2.Endpoint{TokenURL: tokenURL, AuthStyle: authStyle(secret)}}
}

func authStyle(secret string) oauth2.AuthStyle {
	if secret == "" {
		return oauth2.AuthStyleInParams
	}
	return oauth2.AuthStyleInHeader
}

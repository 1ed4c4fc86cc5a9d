package labcli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/syncer-dev/syncer/internal/cli"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// FakeThirdpartyCmd is `syncer-lab fake-thirdparty`, which `syncer
// fake-thirdparty` runs (cli.LabCmd).
type FakeThirdpartyCmd struct {
	Addr               string        `name:"addr" env:"FAKE_ADDR" default:"127.0.0.1:8081" help:"Address to serve on."`
	RateLimit          float64       `name:"rate-limit" env:"FAKE_RATE_LIMIT" default:"0" help:"Requests a second accepted; beyond it 429 with Retry-After. 0: unlimited."`
	RateBurst          int           `name:"rate-burst" env:"FAKE_RATE_BURST" default:"0" help:"Burst of the fake's rate limit."`
	RetryAfter         time.Duration `name:"retry-after" env:"FAKE_RETRY_AFTER" default:"0s" help:"Retry-After sent with 429 (default: computed)."`
	RetryAfterHTTPDate bool          `name:"retry-after-http-date" env:"FAKE_RETRY_AFTER_HTTP_DATE" help:"Send Retry-After as an HTTP date."`
	FailureRate        float64       `name:"failure-rate" env:"FAKE_FAILURE_RATE" default:"0" help:"Share (0..1) of requests answered with a 5xx."`
	FailureStatus      int           `name:"failure-status" env:"FAKE_FAILURE_STATUS" default:"503" help:"Status of injected failures."`
	Latency            time.Duration `name:"latency" env:"FAKE_LATENCY" default:"0s" help:"Added to every request."`
	TimeoutRate        float64       `name:"timeout-rate" env:"FAKE_TIMEOUT_RATE" default:"0" help:"Share (0..1) of requests never answered."`
	MaxBatchItems      int           `name:"max-batch-items" env:"FAKE_MAX_BATCH_ITEMS" default:"0" help:"Answer 413 to larger batches. 0: no limit."`
	RejectField        string        `name:"reject-field" env:"FAKE_REJECT_FIELD" help:"Reject items whose payload has this top-level key."`
	PoisonField        string        `name:"poison-field" env:"FAKE_POISON_FIELD" help:"Answer 400 to batches holding a payload with this top-level key."`
	Token              string        `name:"token" env:"FAKE_TOKEN" help:"Require this bearer token (401 otherwise)."`
	IgnoreKeys         bool          `name:"ignore-idempotency-key" env:"FAKE_IGNORE_IDEMPOTENCY_KEY" help:"Treat every request as new, as a third party without idempotency would."`
	Outage             time.Duration `name:"outage" env:"FAKE_OUTAGE" default:"0s" help:"Answer 503 to everything for this long after start."`
	Seed               int64         `name:"seed" env:"FAKE_SEED" default:"0" help:"Seed of the random shares (0: random)."`
	Redirect           int           `name:"redirect" env:"FAKE_REDIRECT" default:"0" help:"Answer every batch with this redirect status (301, 302, 303, 307 or 308). 0: none."`
	RedirectLocation   string        `name:"redirect-location" env:"FAKE_REDIRECT_LOCATION" help:"Location sent with --redirect (default: /v1/moved on the fake)."`
	BadAnswer          string        `name:"bad-answer" env:"FAKE_BAD_ANSWER" help:"Answer batches with a 200 that is not the contract's: html, malformed, empty, huge, unknown-status or unknown-id."`
	RetryAfterRaw      string        `name:"retry-after-raw" env:"FAKE_RETRY_AFTER_RAW" help:"Send this Retry-After verbatim with 429 and outage answers (e.g. 999999999)."`
	UnannouncedLimit   float64       `name:"unannounced-limit" env:"FAKE_UNANNOUNCED_LIMIT" default:"0" help:"Requests a second beyond which a bare 429 (no Retry-After, no rate-limit headers) is answered. 0: none."`
	UnannouncedBurst   int           `name:"unannounced-burst" env:"FAKE_UNANNOUNCED_BURST" default:"0" help:"Requests that may come at once within --unannounced-limit (0: the limit rounded up)."`
	Quota              int           `name:"quota" env:"FAKE_QUOTA" default:"0" help:"Requests allowed per --quota-window, announced with RateLimit-* headers; 429 when exhausted. 0: none."`
	QuotaWindow        time.Duration `name:"quota-window" env:"FAKE_QUOTA_WINDOW" default:"1s" help:"Window of --quota."`
	QuotaXHeaders      bool          `name:"quota-x-headers" env:"FAKE_QUOTA_X_HEADERS" help:"Announce --quota with X-RateLimit-* headers too."`
	Format             string        `name:"format" env:"FAKE_FORMAT" default:"syncer" help:"Format spoken on every path but /v1/: syncer, standard-webhooks, cloudevents, elasticsearch (external versions: 409, 404 for a delete of nothing) or custom (a HubSpot-like .../batch/upsert and .../batch/archive answered 207)."`
	SigningSecret      string        `name:"signing-secret" env:"FAKE_SIGNING_SECRET" help:"Verify standard-webhooks signatures with this secret (whsec_ and base64); 401 otherwise."`
	ItemTooManyRate    float64       `name:"item-429-rate" env:"FAKE_ITEM_429_RATE" default:"0" help:"Share (0..1) of elasticsearch bulk items answered 429 (--reject-field answers items 400)."`
	ItemFailShare      float64       `name:"item-fail-share" env:"FAKE_ITEM_FAIL_SHARE" default:"0" help:"Share (0..1) of item ids, by a hash of the id (the same ids at every request), answered --item-fail-status: per item in an elasticsearch bulk answer, the whole request's status in standard-webhooks. A shard that stays unavailable for some documents."`
	ItemFailStatus     int           `name:"item-fail-status" env:"FAKE_ITEM_FAIL_STATUS" default:"503" help:"Status of --item-fail-share's items: 503, 429, or 404 for standard-webhooks."`
	TenantRateLimit    float64       `name:"tenant-rate-limit" env:"FAKE_TENANT_RATE_LIMIT" default:"0" help:"Each tenant's own requests a second under /t/{tenant}/; beyond it a bare 429 (with Retry-After if --tenant-announced). 0: the fake's own limits, per tenant."`
	TenantRateBurst    int           `name:"tenant-rate-burst" env:"FAKE_TENANT_RATE_BURST" default:"0" help:"Requests a tenant may send at once within --tenant-rate-limit (0: the limit rounded up)."`
	TenantAnnounced    bool          `name:"tenant-announced" env:"FAKE_TENANT_ANNOUNCED" help:"Answer --tenant-rate-limit's 429s with Retry-After."`
	TenantTokenPrefix  string        `name:"tenant-token-prefix" env:"FAKE_TENANT_TOKEN_PREFIX" help:"Each tenant accepts only the bearer token PREFIX+tenant (401 otherwise). Default: --token."`
	TenantRefresh      string        `name:"tenant-refresh-prefix" env:"FAKE_TENANT_REFRESH_PREFIX" help:"Serve POST /t/{tenant}/oauth/token (refresh_token grant, first token PREFIX+tenant), rotating the refresh token at each grant."`
	TenantFamily       bool          `name:"tenant-refresh-family" env:"FAKE_TENANT_REFRESH_FAMILY" help:"With --tenant-refresh-prefix: a refresh token already rotated away from, used again, revokes the tenant's whole family (Auth0's and Okta's reuse detection): every later grant, the newest token's included, is 400 invalid_grant until POST /v1/admin/tenants/{tenant}/restore starts a new family at the first token. GET /v1/tenants/stats counts grants, refusals and reuses under \"tokens\"."`
	TenantNoAccess     bool          `name:"tenant-no-access-token" env:"FAKE_TENANT_NO_ACCESS_TOKEN" help:"With --tenant-refresh-prefix: answer each grant 200 with the rotated refresh token and no access_token, as a misbehaving token endpoint does (the token is rotated all the same)."`
	TenantTokenLife    time.Duration `name:"tenant-token-life" env:"FAKE_TENANT_TOKEN_LIFE" default:"1h" help:"Life (expires_in) of the access tokens --tenant-refresh-prefix's endpoint gives: short, the daemon renews often."`
	AnswerLoad         int64         `name:"answer-load" env:"FAKE_ANSWER_LOAD" default:"0" help:"Add \"n\": N to every custom answer, a count a response program may iterate over (range(.body.n)): a third party making a response program slow."`
	EchoAuthorization  bool          `name:"echo-authorization" env:"FAKE_ECHO_AUTHORIZATION" help:"Quote the Authorization header back: POST /oauth/token refuses every grant (401 invalid_client) quoting the header and the form, and lookups add it to every payload as seen_authorization."`
	Lookup             bool          `name:"lookup" env:"FAKE_LOOKUP" help:"Keep the latest item of every id, so POST /v1/lookup answers what the fake holds (syncer verify) and POST /v1/admin/drift loses, edits and re-creates items."`
}

// Validate checks the shares.
func (c *FakeThirdpartyCmd) Validate() error {
	switch {
	case c.FailureRate < 0 || c.FailureRate > 1:
		return usagef("--failure-rate must be between 0 and 1, got %v", c.FailureRate)
	case c.TimeoutRate < 0 || c.TimeoutRate > 1:
		return usagef("--timeout-rate must be between 0 and 1, got %v", c.TimeoutRate)
	case c.RateLimit < 0:
		return usagef("--rate-limit must not be negative, got %v", c.RateLimit)
	case c.Redirect != 0 && !slices.Contains([]int{301, 302, 303, 307, 308}, c.Redirect):
		return usagef("--redirect must be 301, 302, 303, 307 or 308, got %d", c.Redirect)
	case c.BadAnswer != "" && !slices.Contains(fakethirdparty.BadAnswers, c.BadAnswer):
		return usagef("--bad-answer must be one of %s, got %q", strings.Join(fakethirdparty.BadAnswers, ", "), c.BadAnswer)
	case strings.ContainsAny(c.RetryAfterRaw, "\r\n"):
		return usagef("--retry-after-raw must be one line")
	case c.UnannouncedLimit < 0:
		return usagef("--unannounced-limit must not be negative, got %v", c.UnannouncedLimit)
	case c.UnannouncedBurst < 0:
		return usagef("--unannounced-burst must not be negative, got %d", c.UnannouncedBurst)
	case !slices.Contains(fakethirdparty.Formats, c.Format):
		return usagef("--format must be one of %s, got %q", strings.Join(fakethirdparty.Formats, ", "), c.Format)
	case c.ItemTooManyRate < 0 || c.ItemTooManyRate > 1:
		return usagef("--item-429-rate must be between 0 and 1, got %v", c.ItemTooManyRate)
	case c.ItemFailShare < 0 || c.ItemFailShare > 1:
		return usagef("--item-fail-share must be between 0 and 1, got %v", c.ItemFailShare)
	case c.AnswerLoad < 0:
		return usagef("--answer-load must not be negative, got %d", c.AnswerLoad)
	case c.tenants().Validate() != nil:
		return usagef("%v", c.tenants().Validate())
	case c.Quota < 0:
		return usagef("--quota must not be negative, got %d", c.Quota)
	case c.Quota > 0 && c.QuotaWindow <= 0:
		return usagef("--quota-window must be positive, got %s", c.QuotaWindow)
	}
	return nil
}

// config is the fake's Config the flags ask for.
func (c *FakeThirdpartyCmd) config() fakethirdparty.Config {
	return fakethirdparty.Config{
		RateLimit: c.RateLimit, RateBurst: c.RateBurst, RetryAfter: c.RetryAfter, RetryAfterHTTPDate: c.RetryAfterHTTPDate,
		FailureRate: c.FailureRate, FailureStatus: c.FailureStatus, Latency: c.Latency, TimeoutRate: c.TimeoutRate,
		MaxBatchItems: c.MaxBatchItems, RejectField: c.RejectField, PoisonField: c.PoisonField, Token: c.Token,
		IgnoreIdempotencyKey: c.IgnoreKeys, Seed: c.Seed,
		Redirect: c.Redirect, RedirectLocation: c.RedirectLocation, BadAnswer: c.BadAnswer, RetryAfterRaw: c.RetryAfterRaw,
		UnannouncedLimit: c.UnannouncedLimit, Quota: c.Quota, QuotaWindow: c.QuotaWindow, QuotaXHeaders: c.QuotaXHeaders,
		UnannouncedBurst: c.UnannouncedBurst,
		Format:           c.Format, SigningSecret: c.SigningSecret, ItemTooManyRate: c.ItemTooManyRate,
		ItemFailShare: c.ItemFailShare, ItemFailStatus: c.ItemFailStatus, AnswerLoad: c.AnswerLoad, Lookup: c.Lookup, EchoAuthorization: c.EchoAuthorization,
		Tenants: c.tenants(),
	}
}

func (c *FakeThirdpartyCmd) tenants() fakethirdparty.TenantConfig {
	return fakethirdparty.TenantConfig{RateLimit: c.TenantRateLimit, Burst: c.TenantRateBurst, Announced: c.TenantAnnounced, TokenPrefix: c.TenantTokenPrefix, RefreshPrefix: c.TenantRefresh,
		RefreshFamily: c.TenantFamily, TokenLife: c.TenantTokenLife, NoAccessToken: c.TenantNoAccess}
}

// Run serves until SIGTERM or SIGINT.
func (c *FakeThirdpartyCmd) Run(ctx context.Context, env *cli.Env) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	fake := fakethirdparty.New(c.config())
	if c.Outage > 0 {
		fake.Outage(c.Outage)
	}
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", c.Addr, err)
	}
	srv := &http.Server{Handler: fake, ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintf(env.Stdout, "fake third party listening on http://%s (stats: GET /v1/stats)\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

package fakethirdparty

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// TenantPrefix starts the path of a request to one tenant's account:
// /t/{tenant}/v1/batches, /t/{tenant}/v1/stats, /t/{tenant}/crm/v3/... Every
// route the fake serves without the prefix is served under it, as that
// tenant's own account.
const TenantPrefix = "/t/"

// revokedToken is a token no client can send (a header holds no NUL), so a
// revoked tenant answers 401 through the fake's own token check and the
// refusal is counted in that tenant's stats like any other.
const revokedToken = "\x00revoked"

// TenantConfig holds the knobs of the tenants served under TenantPrefix.
// The zero value serves every tenant with the Server's own knobs and an
// account of its own.
type TenantConfig struct {
	// RateLimit is each tenant's own requests per second. Beyond it a bare
	// 429 (no Retry-After, no rate-limit headers), as a third party that
	// does not announce its per-account limit answers; see Announced.
	// Defaults to 0: the Server's own RateLimit and UnannouncedLimit, each
	// tenant with a limiter of its own.
	RateLimit float64
	// Burst is how many requests a tenant may send at once within
	// RateLimit. Defaults to RateLimit rounded up, at least 1.
	Burst int
	// Announced answers RateLimit's 429s with Retry-After, as Config's
	// RateLimit does. Defaults to false: unannounced.
	Announced bool
	// TokenPrefix, when set, makes each tenant accept only the bearer
	// token TokenPrefix+tenant (401 otherwise), so one tenant's token is
	// refused by every other. Defaults to "": the Server's own Token.
	TokenPrefix string
	// RefreshPrefix, when set, serves POST /t/{tenant}/oauth/token with
	// grant_type=refresh_token: it accepts RefreshPrefix+tenant at first,
	// answers the tenant's token and a new refresh token, and from then on
	// accepts only the newest one (400 invalid_grant otherwise), as a
	// third party that rotates refresh tokens does. Defaults to "": no
	// token endpoint.
	RefreshPrefix string
	// RefreshFamily, with RefreshPrefix, revokes a tenant's whole family
	// of refresh tokens when one it already rotated away from is used
	// again (reuse detection, as Auth0 and Okta do): that grant and every
	// later one of the tenant, the newest token's included, is 400
	// invalid_grant "family revoked" until the tenant is restored (POST
	// /v1/admin/tenants/{tenant}/restore), which starts a new family at
	// the first token, RefreshPrefix+tenant. A token never given (another
	// tenant's, a typo) is refused alone. Defaults to false: a spent token
	// is refused alone, the family stays.
	RefreshFamily bool
	// TokenLife is the life of the access tokens the token endpoint gives
	// (its expires_in, in whole seconds, at least 1). Defaults to an hour.
	TokenLife time.Duration
	// NoAccessToken, with RefreshPrefix, answers each grant 200 with the
	// rotated refresh token and no access_token, as a misbehaving token
	// endpoint does: the refresh token is rotated all the same, so a
	// client that drops the answer spends a spent token at its next grant.
	// SetConfig turns it on and off while the fake serves. Defaults to
	// false.
	NoAccessToken bool
}

// TokenStats is what a tenant's token endpoint answered (RefreshPrefix).
type TokenStats struct {
	// Grants are the refresh_token grants answered 200.
	Grants int64 `json:"grants"`
	// Refused are those answered 400 invalid_grant.
	Refused int64 `json:"refused"`
	// Reuses are grants with a refresh token the endpoint had already
	// rotated away from: what revokes the family under RefreshFamily.
	Reuses int64 `json:"reuses"`
	// RefusedRevoked are the refusals (counted in Refused too) of grants
	// while the tenant's connection was revoked (RevokeTenant): the
	// refusals the fake's user caused, told apart from the client's.
	RefusedRevoked int64 `json:"refused_revoked,omitempty"`
	// FamilyRevoked says the tenant's family is revoked (RefreshFamily),
	// until a restore.
	FamilyRevoked bool `json:"family_revoked"`
}

// TenantToken is the bearer token tenant accepts under cfg, "" for none.
func (cfg TenantConfig) TenantToken(base Config, tenant string) string {
	if cfg.TokenPrefix != "" {
		return cfg.TokenPrefix + tenant
	}
	return base.Token
}

// tenants serves the accounts under TenantPrefix. An account is a Server
// made at its tenant's first request: a map entry, its maps and limiters,
// no goroutine or timer, so thousands of tenants cost only their records.
type tenants struct {
	mu       sync.Mutex
	base     Config
	accounts map[string]*Server
	tokens   map[string]string // tokens set by the admin route, over TenantToken
	revoked  map[string]bool
	refresh  map[string]int // rotations of each tenant's refresh token
	families map[string]int // each tenant's family of refresh tokens (NewRefreshFamily), 0 the first
	grants   map[string]*TokenStats
}

func newTenants(base Config) *tenants {
	return &tenants{base: base, accounts: map[string]*Server{}, tokens: map[string]string{}, revoked: map[string]bool{}, refresh: map[string]int{}, families: map[string]int{}, grants: map[string]*TokenStats{}}
}

// configLocked is the Config of tenant's account.
func (ts *tenants) configLocked(tenant string) Config {
	cfg := ts.base
	tc := cfg.Tenants
	cfg.Tenants = TenantConfig{}
	// Each account records only what it receives, not the run's expected
	// total: 10,000 tenants must not each preallocate it.
	cfg.ExpectedItems = 0
	if tc.RateLimit > 0 {
		if tc.Announced {
			cfg.RateLimit, cfg.RateBurst = tc.RateLimit, tc.Burst
		} else {
			cfg.UnannouncedLimit, cfg.UnannouncedBurst = tc.RateLimit, tc.Burst
		}
	}
	cfg.Token = tc.TenantToken(ts.base, tenant)
	if tok, ok := ts.tokens[tenant]; ok {
		cfg.Token = tok
	}
	if ts.revoked[tenant] {
		cfg.Token = revokedToken
	}
	return cfg
}

// account returns tenant's Server, making it at first use.
func (ts *tenants) account(tenant string) *Server {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	a, ok := ts.accounts[tenant]
	if !ok {
		a = newServer(ts.configLocked(tenant), false)
		ts.accounts[tenant] = a
	}
	return a
}

// setBase applies the Server's new knobs to every account.
func (ts *tenants) setBase(base Config) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.base = base
	for name, a := range ts.accounts {
		a.SetConfig(ts.configLocked(name))
	}
}

// reset forgets every account and what it received; revocations and set
// tokens stay, as knobs do.
func (ts *tenants) reset() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for _, a := range ts.accounts {
		a.Close()
	}
	clear(ts.accounts)
}

func (ts *tenants) close() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for _, a := range ts.accounts {
		a.Close()
	}
}

// setAccess revokes tenant's token (revoke) or restores it, to token when
// one is given.
func (ts *tenants) setAccess(tenant string, revoke bool, token string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if revoke {
		ts.revoked[tenant] = true
	} else {
		delete(ts.revoked, tenant)
		if st := ts.grants[tenant]; st != nil && st.FamilyRevoked {
			// A new family, as a person connecting the account again
			// gets.
			st.FamilyRevoked = false
			ts.refresh[tenant] = 0
		}
		if token != "" {
			ts.tokens[tenant] = token
		}
	}
	if a, ok := ts.accounts[tenant]; ok {
		a.SetConfig(ts.configLocked(tenant))
	}
}

// stats returns each account's Stats, by tenant.
func (ts *tenants) stats() map[string]Stats {
	ts.mu.Lock()
	accounts := make(map[string]*Server, len(ts.accounts))
	for name, a := range ts.accounts {
		accounts[name] = a
	}
	ts.mu.Unlock()
	out := make(map[string]Stats, len(accounts))
	for name, a := range accounts {
		out[name] = a.Stats()
	}
	return out
}

// ServeHTTP serves /t/{tenant}/rest as rest on tenant's account.
func (ts *tenants) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	escaped := strings.TrimPrefix(r.URL.EscapedPath(), TenantPrefix)
	seg, rest, _ := strings.Cut(escaped, "/")
	tenant, err := url.PathUnescape(seg)
	if err != nil || tenant == "" {
		writeJSON(w, http.StatusNotFound, errorBody("a tenant's path is /t/{tenant}/..."))
		return
	}
	r2 := new(http.Request)
	*r2 = *r
	u := *r.URL
	u.RawPath = "/" + rest
	if u.Path, err = url.PathUnescape(u.RawPath); err != nil {
		writeJSON(w, http.StatusBadRequest, errorBody("bad path"))
		return
	}
	if u.Path == u.RawPath {
		u.RawPath = ""
	}
	r2.URL = &u
	r2.RequestURI = u.RequestURI()
	if u.Path == "/oauth/token" && r.Method == http.MethodPost && ts.refreshPrefix() != "" {
		ts.serveToken(w, r2, tenant)
		return
	}
	ts.account(tenant).ServeHTTP(w, r2)
}

// TenantStats is the answer of GET /v1/tenants/stats.
type TenantStats struct {
	// Total sums the counts of every tenant's account; its
	// MaxInFlight and MaxRequestsInOneSecond are the largest of one
	// account, its times the earliest and latest.
	Total   Stats            `json:"total"`
	Tenants map[string]Stats `json:"tenants"`
	// Tokens is what each tenant's token endpoint answered
	// (TenantConfig.RefreshPrefix), by tenant.
	Tokens map[string]TokenStats `json:"tokens,omitempty"`
}

// TenantStats returns what each tenant's account received, and the sum.
// The untenanted account (Stats) is not in it.
func (s *Server) TenantStats() TenantStats {
	if s.tenants == nil {
		return TenantStats{Tenants: map[string]Stats{}}
	}
	by := s.tenants.stats()
	names := make([]string, 0, len(by))
	for name := range by {
		names = append(names, name)
	}
	slices.Sort(names)
	out := TenantStats{Tenants: by, Tokens: s.tenants.tokenStats()}
	out.Total.RequestsByStatus = map[string]int64{}
	for _, name := range names {
		out.Total.add(by[name])
	}
	return out
}

// RevokeTenant answers every request of tenant 401 until RestoreTenant.
func (s *Server) RevokeTenant(tenant string) {
	if s.tenants != nil {
		s.tenants.setAccess(tenant, true, "")
	}
}

// NewRefreshFamily starts a new family of tenant's refresh tokens, as a
// person connecting the account again gets (RefreshPrefix): the old
// family's tokens are refused alone from now on (unknown, not reuses),
// and a revoked family is over. It returns the new family's first token,
// for the application to store.
func (s *Server) NewRefreshFamily(tenant string) string {
	if s.tenants == nil {
		return ""
	}
	ts := s.tenants
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.families[tenant]++
	ts.refresh[tenant] = 0
	if st := ts.grants[tenant]; st != nil {
		st.FamilyRevoked = false
	}
	return ts.firstRefreshLocked(tenant)
}

// RestoreTenant ends RevokeTenant: tenant accepts token again, or its own
// token (TenantConfig.TenantToken, or the last given here) when token is "".
func (s *Server) RestoreTenant(tenant, token string) {
	if s.tenants != nil {
		s.tenants.setAccess(tenant, false, token)
	}
}

func (s *Server) handleTenantStats(w http.ResponseWriter, r *http.Request) {
	b, err := json.Marshal(s.TenantStats())
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, errorBody(err.Error()))
		return
	}
	writeJSON(w, http.StatusOK, b)
}

// handleTenantAccess serves POST /v1/admin/tenants/{tenant}/revoke and
// /restore (with an optional token=... for a new token).
func (s *Server) handleTenantAccess(w http.ResponseWriter, r *http.Request) {
	tenant := r.PathValue("tenant")
	switch r.PathValue("action") {
	case "revoke":
		s.RevokeTenant(tenant)
	case "restore":
		s.RestoreTenant(tenant, r.FormValue("token"))
	default:
		writeJSON(w, http.StatusNotFound, errorBody(fmt.Sprintf("unknown action %q: revoke or restore", r.PathValue("action"))))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// add sums o's counts into st.
func (st *Stats) add(o Stats) {
	st.Requests += o.Requests
	for code, n := range o.RequestsByStatus {
		st.RequestsByStatus[code] += n
	}
	st.ItemsReceived += o.ItemsReceived
	st.ItemsAccepted += o.ItemsAccepted
	st.ItemsRejected += o.ItemsRejected
	st.DistinctPairs += o.DistinctPairs
	st.DuplicatePairs += o.DuplicatePairs
	st.DuplicatesSameKey += o.DuplicatesSameKey
	st.DuplicatesOtherKey += o.DuplicatesOtherKey
	st.KeyReplays += o.KeyReplays
	st.KeyConflicts += o.KeyConflicts
	st.OutOfOrder += o.OutOfOrder
	st.Tombstones += o.Tombstones
	st.MaxInFlight = max(st.MaxInFlight, o.MaxInFlight)
	st.OverlappingIDs += o.OverlappingIDs
	st.OverQuota += o.OverQuota
	st.BadAnswers += o.BadAnswers
	st.KeyBodyConflicts += o.KeyBodyConflicts
	st.VersionConflicts += o.VersionConflicts
	st.ItemFails += o.ItemFails
	st.MaxRequestsInOneSecond = max(st.MaxRequestsInOneSecond, o.MaxRequestsInOneSecond)
	if !o.FirstRequestAt.IsZero() && (st.FirstRequestAt.IsZero() || o.FirstRequestAt.Before(st.FirstRequestAt)) {
		st.FirstRequestAt = o.FirstRequestAt
	}
	if o.LastRequestAt.After(st.LastRequestAt) {
		st.LastRequestAt = o.LastRequestAt
	}
}

// Validate names the field of a knob out of range.
func (cfg TenantConfig) Validate() error {
	switch {
	case cfg.RateLimit < 0:
		return fmt.Errorf("--tenant-rate-limit must not be negative, got %v", cfg.RateLimit)
	case cfg.Burst < 0:
		return fmt.Errorf("--tenant-rate-burst must not be negative, got %d", cfg.Burst)
	case strings.ContainsAny(cfg.TokenPrefix, "\r\n\x00"):
		return fmt.Errorf("--tenant-token-prefix must be one line")
	case cfg.RefreshFamily && cfg.RefreshPrefix == "":
		return fmt.Errorf("--tenant-refresh-family needs --tenant-refresh-prefix")
	case cfg.TokenLife < 0:
		return fmt.Errorf("--tenant-token-life must not be negative, got %s", cfg.TokenLife)
	}
	return nil
}

func (ts *tenants) refreshPrefix() string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.base.Tenants.RefreshPrefix
}

// firstRefreshLocked is the first refresh token of tenant's family:
// RefreshPrefix+tenant, then RefreshPrefix+tenant~F for the F-th family
// NewRefreshFamily started, so no two families share a token, as no two
// connections of a real provider do.
func (ts *tenants) firstRefreshLocked(tenant string) string {
	first := ts.base.Tenants.RefreshPrefix + tenant
	if f := ts.families[tenant]; f > 0 {
		first += "~" + strconv.Itoa(f)
	}
	return first
}

// refreshTokenLocked is the n-th refresh token of tenant's family.
func (ts *tenants) refreshTokenLocked(tenant string, n int) string {
	if n == 0 {
		return ts.firstRefreshLocked(tenant)
	}
	return fmt.Sprintf("%s.%d", ts.firstRefreshLocked(tenant), n)
}

// serveToken answers a refresh_token grant for tenant, rotating its refresh
// token. A revoked tenant's grant is refused, as a revoked connection's is;
// under RefreshFamily a spent token used again revokes the tenant's family.
func (ts *tenants) serveToken(w http.ResponseWriter, r *http.Request, tenant string) {
	if err := r.ParseForm(); err != nil || r.PostForm.Get("grant_type") != "refresh_token" {
		writeJSON(w, http.StatusBadRequest, []byte(`{"error":"unsupported_grant_type"}`))
		return
	}
	given := r.PostForm.Get("refresh_token")
	ts.mu.Lock()
	st := ts.grants[tenant]
	if st == nil {
		st = &TokenStats{}
		ts.grants[tenant] = st
	}
	n := ts.refresh[tenant]
	refuse := func(description string) {
		st.Refused++
		ts.mu.Unlock()
		b, _ := json.Marshal(map[string]string{"error": "invalid_grant", "error_description": description})
		writeJSON(w, http.StatusBadRequest, b)
	}
	switch {
	case ts.revoked[tenant]:
		st.RefusedRevoked++
		refuse("the connection is revoked")
		return
	case given != ts.refreshTokenLocked(tenant, n):
		if k, ok := ts.generationLocked(tenant, given); ok && k < n {
			st.Reuses++
			if ts.base.Tenants.RefreshFamily {
				st.FamilyRevoked = true
			}
			refuse("refresh token reused")
			return
		}
		refuse("unknown refresh token")
		return
	case st.FamilyRevoked:
		refuse("family revoked")
		return
	}
	ts.refresh[tenant] = n + 1
	st.Grants++
	next := ts.refreshTokenLocked(tenant, n+1)
	access := ts.configLocked(tenant).Token
	life := ts.base.Tenants.TokenLife
	noAccess := ts.base.Tenants.NoAccessToken
	ts.mu.Unlock()
	if noAccess {
		b, _ := json.Marshal(struct {
			TokenType    string `json:"token_type"`
			RefreshToken string `json:"refresh_token"`
		}{"Bearer", next})
		writeJSON(w, http.StatusOK, b)
		return
	}
	if access == "" {
		// The tenant takes any bearer token, but an OAuth2 client refuses
		// an answer without one after the refresh token was rotated here,
		// and would spend the old one again.
		access = "access-" + tenant
	}
	if life <= 0 {
		life = time.Hour
	}
	b, _ := json.Marshal(struct {
		AccessToken  string `json:"access_token"`
		TokenType    string `json:"token_type"`
		ExpiresIn    int    `json:"expires_in"`
		RefreshToken string `json:"refresh_token"`
	}{access, "Bearer", max(1, int(life/time.Second)), next})
	writeJSON(w, http.StatusOK, b)
}

// generationLocked is which of tenant's refresh tokens refresh is (0 the
// first), if it is one of its family's.
func (ts *tenants) generationLocked(tenant, refresh string) (int, bool) {
	first := ts.firstRefreshLocked(tenant)
	if refresh == first {
		return 0, true
	}
	rest, ok := strings.CutPrefix(refresh, first+".")
	if !ok {
		return 0, false
	}
	k, err := strconv.Atoi(rest)
	return k, err == nil && k > 0
}

// tokenStats returns each tenant's TokenStats.
func (ts *tenants) tokenStats() map[string]TokenStats {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	out := make(map[string]TokenStats, len(ts.grants))
	for name, st := range ts.grants {
		out[name] = *st
	}
	return out
}

package console

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"
)

// cookieName is the session cookie's name.
const cookieName = "syncer_console"

// session is a signed-in browser: its proof is put in every form and
// checked on every POST, so a request a page of another site made the
// browser send (with the cookie) is refused.
type session struct {
	proof   string
	expires time.Time
}

// sessions are kept in memory: a daemon's restart signs everyone out,
// which costs a sign-in and keeps no secret in the database.
type sessions struct {
	mu  sync.Mutex
	ttl time.Duration
	all map[string]session
}

func newSessions(ttl time.Duration) *sessions {
	return &sessions{ttl: ttl, all: map[string]session{}}
}

// randomText is 256 random bits, URL-safe.
func randomText() string { return rand.Text() + rand.Text() }

// start opens a session and returns its id.
func (s *sessions) start(now time.Time) (id string, sess session) {
	id, sess = randomText(), session{proof: randomText(), expires: now.Add(s.ttl)}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range s.all {
		if now.After(v.expires) {
			delete(s.all, k)
		}
	}
	s.all[id] = sess
	return id, sess
}

func (s *sessions) get(id string, now time.Time) (session, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, ok := s.all[id]
	if !ok || now.After(sess.expires) {
		delete(s.all, id)
		return session{}, false
	}
	return sess, true
}

func (s *sessions) end(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.all, id)
}

// sameSecret compares in constant time, whatever the lengths: both sides
// are hashed first.
func sameSecret(got, want string) bool {
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

// caller is who sent a request: a script with the token, or a signed-in
// browser's session.
type caller struct {
	bearer    bool
	sessionID string
	session   session
}

// authenticate returns the request's caller, or false when it has neither
// the token nor a live session; wait is set when the request's address is
// limited (its token was not compared).
//
// A session's cookie is not counted against the address: its id is 256
// random bits, never guessed, and a stale one is what every open tab
// sends after a restart; a browser signed in before a guesser behind the
// same address started keeps its pages.
func (c *Console) authenticate(r *http.Request) (cl caller, ok bool, wait time.Duration) {
	if h := r.Header.Get("Authorization"); h != "" {
		tok, isBearer := strings.CutPrefix(h, "Bearer ")
		if !isBearer {
			tok = "" // another scheme fails as a wrong token: the token is never empty
		}
		ok, wait = c.tryToken(r, pathBearer, tok)
		return caller{bearer: true}, ok, wait
	}
	ck, err := r.Cookie(cookieName)
	if err != nil {
		return caller{}, false, 0
	}
	sess, ok := c.sessions.get(ck.Value, c.now())
	return caller{sessionID: ck.Value, session: sess}, ok, 0
}

// tryToken compares a token offered on path (pathBearer, pathForm) with
// the console's, under the limit of failures of the request's address.
// When the address is limited it compares nothing and returns how long
// to wait: the right token would be refused too, or the limit would tell
// a guesser which of its guesses was right.
func (c *Console) tryToken(r *http.Request, path, tok string) (ok bool, wait time.Duration) {
	addr := c.clientOf(r)
	wait, first := c.failures.take(addr, c.now())
	if wait > 0 {
		c.metrics.ConsoleAuthLimited(path)
		if first {
			c.cfg.Logger.WarnContext(r.Context(), "console: too many wrong tokens from one address: its sign-ins are refused unchecked until its wait ends; other addresses are not limited",
				slog.String("address", addrText(addr)), slog.String("path", path),
				slog.Int("burst", c.cfg.FailedSignInBurst), slog.Duration("every", c.cfg.FailedSignInEvery),
				slog.Duration("retry_after", wait))
		}
		return false, wait
	}
	if sameSecret(tok, c.cfg.Token) {
		c.failures.giveBack(addr, c.now())
		return true, 0
	}
	c.metrics.ConsoleAuthFailed(path)
	return false, 0
}

// addrText is a limited address as the log shows it: an IPv4 address
// alone, an IPv6 one as its /64.
func addrText(p netip.Prefix) string {
	if p.Addr().Is4() {
		return p.Addr().String()
	}
	return p.String()
}

// limited answers a request whose address is limited: 429 and when to
// come back.
func limited(w http.ResponseWriter, wait time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(retryAfter(wait)))
	http.Error(w, fmt.Sprintf("429 too many wrong tokens from this address: try again in %d s", retryAfter(wait)), http.StatusTooManyRequests)
}

// proofOK says whether a POST carries the session's proof; a script's
// token is its own proof, since no other site can make a browser send it.
func (cl caller) proofOK(r *http.Request) bool {
	return cl.bearer || sameSecret(r.PostFormValue("proof"), cl.session.proof)
}

// signIn checks the token of the form, under the same limit of its
// address as a Bearer token, and opens a session.
func (c *Console) signIn(w http.ResponseWriter, r *http.Request) {
	ok, wait := c.tryToken(r, pathForm, r.PostFormValue("token"))
	if wait > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter(wait)))
		c.renderSignIn(w, http.StatusTooManyRequests, fmt.Sprintf("Too many wrong tokens from your address: try again in %d seconds.", retryAfter(wait)), r.PostFormValue("next"))
		return
	}
	if !ok {
		c.renderSignIn(w, http.StatusUnauthorized, "That is not the console's token.", r.PostFormValue("next"))
		return
	}
	id, _ := c.sessions.start(c.now())
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: id, Path: Prefix, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, MaxAge: int(c.cfg.SessionTTL.Seconds())})
	http.Redirect(w, r, localPath(r.PostFormValue("next")), http.StatusSeeOther)
}

// signOut ends the session.
func (c *Console) signOut(w http.ResponseWriter, r *http.Request, cl caller) {
	c.sessions.end(cl.sessionID)
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: Prefix, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, MaxAge: -1})
	http.Redirect(w, r, Prefix, http.StatusSeeOther)
}

// localPath keeps a redirect inside the console.
func localPath(p string) string {
	u, err := url.Parse(p)
	if err != nil || u.Scheme != "" || u.Host != "" || strings.ContainsAny(p, "\\\r\n") {
		return Prefix
	}
	if clean := path.Clean(u.Path); clean != u.Path || (clean != Prefix && !strings.HasPrefix(clean, Prefix+"/")) {
		return Prefix
	}
	return p
}

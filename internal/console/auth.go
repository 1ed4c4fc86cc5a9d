package console

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"net/url"
	"path"
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
// the token nor a live session.
func (c *Console) authenticate(r *http.Request) (caller, bool) {
	if h := r.Header.Get("Authorization"); h != "" {
		tok, ok := strings.CutPrefix(h, "Bearer ")
		return caller{bearer: true}, ok && sameSecret(tok, c.cfg.Token)
	}
	ck, err := r.Cookie(cookieName)
	if err != nil {
		return caller{}, false
	}
	sess, ok := c.sessions.get(ck.Value, c.now())
	return caller{sessionID: ck.Value, session: sess}, ok
}

// proofOK says whether a POST carries the session's proof; a script's
// token is its own proof, since no other site can make a browser send it.
func (cl caller) proofOK(r *http.Request) bool {
	return cl.bearer || sameSecret(r.PostFormValue("proof"), cl.session.proof)
}

// signIn checks the token of the form, at most at the configured rate
// whatever its outcome, and opens a session.
func (c *Console) signIn(w http.ResponseWriter, r *http.Request) {
	if !c.signIns.Allow() {
		w.Header().Set("Retry-After", "1")
		c.renderSignIn(w, http.StatusTooManyRequests, "Too many sign-in attempts: wait a moment and try again.", r.PostFormValue("next"))
		return
	}
	if !sameSecret(r.PostFormValue("token"), c.cfg.Token) {
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

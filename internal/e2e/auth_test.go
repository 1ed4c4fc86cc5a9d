package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/status"
)

// tokenEndpoint is an OAuth2 token endpoint (client credentials, client
// id and secret in the basic header) whose tokens last ttl; it counts what
// it issued and can revoke a token.
type tokenEndpoint struct {
	id, secret string
	ttl        time.Duration
	srv        *httptest.Server

	mu      sync.Mutex
	issued  int
	expiry  map[string]time.Time
	revoked map[string]bool
}

func newTokenEndpoint(t *testing.T, id, secret string, ttl time.Duration) *tokenEndpoint {
	e := &tokenEndpoint{id: id, secret: secret, ttl: ttl, expiry: map[string]time.Time{}, revoked: map[string]bool{}}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		_ = r.ParseForm()
		if !ok || u != e.id || p != e.secret || r.Form.Get("grant_type") != "client_credentials" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"error":"invalid_client","error_description":"client authentication failed"}`)
			return
		}
		e.mu.Lock()
		e.issued++
		tok := fmt.Sprintf("tok-%d-%s", e.issued, r.Form.Get("audience"))
		e.expiry[tok] = time.Now().Add(e.ttl)
		e.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": int(e.ttl / time.Second)})
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *tokenEndpoint) valid(header string) bool {
	tok, ok := strings.CutPrefix(header, "Bearer ")
	e.mu.Lock()
	defer e.mu.Unlock()
	exp, known := e.expiry[tok]
	return ok && known && !e.revoked[tok] && time.Now().Before(exp)
}

func (e *tokenEndpoint) revokeAll() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for tok := range e.expiry {
		e.revoked[tok] = true
	}
}

func (e *tokenEndpoint) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.issued
}

// guardedAPI is the project's fake behind a check of the Authorization
// header; it counts the requests it refused and keeps every header seen.
type guardedAPI struct {
	fake    *fakethirdparty.Server
	url     string
	mu      sync.Mutex
	refused int
	headers []string
}

func newGuardedAPI(t *testing.T, ok func(*http.Request) bool, tlsCfg *tls.Config) *guardedAPI {
	g := &guardedAPI{fake: fakethirdparty.New(fakethirdparty.Config{})}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.headers = append(g.headers, r.Header.Get("Authorization"))
		good := ok == nil || ok(r)
		if !good {
			g.refused++
		}
		g.mu.Unlock()
		if !good {
			http.Error(w, "bad credentials", http.StatusUnauthorized)
			return
		}
		g.fake.ServeHTTP(w, r)
	})
	srv := httptest.NewUnstartedServer(h)
	if tlsCfg != nil {
		srv.TLS = tlsCfg
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	g.url = srv.URL
	return g
}

func (g *guardedAPI) seen() (refused int, headers []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.refused, append([]string(nil), g.headers...)
}

// secretFile writes a secret to a file of the test's.
func secretFile(t *testing.T, dir, name, value string) string {
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, []byte(value+"\n"), 0o600))
	return p
}

// ordersSource makes a table orders and its source to the destination
// whose YAML is dest (indented under "  d:"), and starts a daemon
// exporting it, logging to log.
func (b *bundle) ordersSource(t *testing.T, dest string, log *dbtest.Buffer, batch ...int) *runningDaemon {
	t.Helper()
	b.exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, total int NOT NULL)`)
	extra := ""
	if len(batch) > 0 {
		extra = fmt.Sprintf(", batch_size: %d", batch[0])
	}
	cfg := sourcesConfig(t, "destinations:\n  d:\n"+dest+"sources:\n  - {table: orders, key: id, destination: d"+extra+"}\n", nil)
	b.installSources(t, cfg)
	return b.startDaemon(t, func(c *daemon.Config) {
		c.ThirdParty.URL = ""
		c.Sources = cfg
		c.Logger = debugLogger(log)
	})
}

func (b *bundle) insertOrders(t *testing.T, from, n int) {
	t.Helper()
	b.exec(t, `INSERT INTO orders SELECT g, g FROM generate_series($1::int, $2::int) g`, from, from+n-1)
}

// requireNoSecret looks for each secret in the daemon's log, status (text
// fields, as JSON) and metrics.
func (b *bundle) requireNoSecret(t *testing.T, d *runningDaemon, log *dbtest.Buffer, secrets ...string) {
	t.Helper()
	rep, err := status.Gather(context.Background(), b.pool, nil)
	require.NoError(t, err)
	st, err := json.Marshal(rep)
	require.NoError(t, err)
	metrics := metricsText(t, d.addr)
	for _, s := range secrets {
		require.NotContains(t, log.String(), s, "a secret in the log")
		require.NotContains(t, string(st), s, "a secret in status")
		require.NotContains(t, metrics, s, "a secret in the metrics")
	}
}

// OAuth2 client credentials against a token endpoint whose tokens last
// 2 s: 5,000 rows over about 20 s, one token asked per expiry, not per
// request, no request refused, and no secret anywhere.
func TestOAuth2TokenPerExpiry(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	dir := t.TempDir()
	ep := newTokenEndpoint(t, "syncer-client", "s3cr3t-client-secret", 2*time.Second)
	api := newGuardedAPI(t, func(r *http.Request) bool { return ep.valid(r.Header.Get("Authorization")) }, nil)
	log := &dbtest.Buffer{}
	d := b.ordersSource(t, fmt.Sprintf(`    url: %s
    max_in_flight: 4
    auth:
      type: oauth2_client_credentials
      token_url: %s/token
      client_id_file: %s
      client_secret_file: %s
      scopes: [sync.write]
      params: {audience: erp}
`, api.url, ep.srv.URL, secretFile(t, dir, "id", "syncer-client"), secretFile(t, dir, "secret", "s3cr3t-client-secret")), log, 25)
	start := time.Now()
	for i := range 20 {
		b.insertOrders(t, i*250+1, 250)
		time.Sleep(time.Until(start.Add(time.Duration(i+1) * time.Second)))
	}
	waitFor(t, time.Minute, "5,000 rows delivered", func() bool { return api.fake.Stats().DistinctPairs >= 5000 })
	took := time.Since(start)
	refused, headers := api.seen()
	t.Logf("5,000 rows in %s: %d requests, %d tokens asked for, %d requests refused", took.Round(time.Second), len(headers), ep.count(), refused)
	require.Zero(t, refused, "no request carried an expired token")
	require.LessOrEqual(t, ep.count(), int(took/(1600*time.Millisecond))+3, "a token per expiry, not per request")
	require.Greater(t, len(headers), 2*ep.count())
	require.True(t, strings.HasSuffix(headers[0], "-erp"), "the audience parameter reached the endpoint")
	rep, err := status.Gather(context.Background(), b.pool, nil)
	require.NoError(t, err)
	require.Zero(t, rep.Failed)
	b.requireNoSecret(t, d, log, "s3cr3t-client-secret", strings.TrimPrefix(headers[len(headers)-1], "Bearer "))
}

// A token revoked mid-run: the 401 brings one new token, the request goes
// again, and nothing is refused or failed.
func TestOAuth2RevokedTokenRefreshedOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	dir := t.TempDir()
	ep := newTokenEndpoint(t, "id", "another-client-secret", time.Hour)
	api := newGuardedAPI(t, func(r *http.Request) bool { return ep.valid(r.Header.Get("Authorization")) }, nil)
	log := &dbtest.Buffer{}
	b.ordersSource(t, fmt.Sprintf(`    url: %s
    auth:
      type: oauth2_client_credentials
      token_url: %s
      client_id_file: %s
      client_secret_file: %s
`, api.url, ep.srv.URL, secretFile(t, dir, "id", "id"), secretFile(t, dir, "secret", "another-client-secret")), log)
	b.insertOrders(t, 1, 100)
	waitFor(t, 30*time.Second, "the first rows", func() bool { return api.fake.Stats().DistinctPairs >= 100 })
	require.Equal(t, 1, ep.count())
	ep.revokeAll()
	b.insertOrders(t, 101, 100)
	waitFor(t, 30*time.Second, "the rows after the revocation", func() bool { return api.fake.Stats().DistinctPairs >= 200 })
	refused, _ := api.seen()
	require.Equal(t, 2, ep.count(), "one refresh after the 401")
	require.Equal(t, 1, refused, "one request carried the revoked token")
	rep, err := status.Gather(context.Background(), b.pool, nil)
	require.NoError(t, err)
	require.Zero(t, rep.Failed)
	require.False(t, rep.Credentials.Refused, "one 401 mended by a new token refuses no credentials")
}

// A wrong client secret: the endpoint's own words in status, no row
// failed; the secret file mended under the running daemon, every row goes.
func TestOAuth2RefusedClientHoldsThenMends(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	dir := t.TempDir()
	ep := newTokenEndpoint(t, "id", "the-right-secret", time.Hour)
	api := newGuardedAPI(t, func(r *http.Request) bool { return ep.valid(r.Header.Get("Authorization")) }, nil)
	log := &dbtest.Buffer{}
	secretPath := secretFile(t, dir, "secret", "a-wrong-secret")
	d := b.ordersSource(t, fmt.Sprintf(`    url: %s
    auth:
      type: oauth2_client_credentials
      token_url: %s
      client_id_file: %s
      client_secret_file: %s
`, api.url, ep.srv.URL, secretFile(t, dir, "id", "id"), secretPath), log)
	b.insertOrders(t, 1, 50)
	waitFor(t, 30*time.Second, "the refusal in status", func() bool {
		rep, err := status.Gather(context.Background(), b.pool, nil)
		require.NoError(t, err)
		for _, dst := range rep.Destinations {
			if dst.Credentials.Refused && strings.Contains(dst.Credentials.Message, "invalid_client") {
				return true
			}
		}
		return false
	})
	require.Zero(t, api.fake.Stats().DistinctPairs)
	// Named as the token endpoint's refusal, its URL and status, not as
	// the destination's answer to a push: in status, the log and the
	// metrics (the destination answered nothing).
	rep, err := status.Gather(context.Background(), b.pool, nil)
	require.NoError(t, err)
	require.Len(t, rep.Destinations, 1)
	cred := rep.Destinations[0].Credentials
	require.Equal(t, ep.srv.URL, cred.TokenEndpoint)
	require.Equal(t, http.StatusUnauthorized, cred.Status, "the endpoint's status")
	require.Contains(t, cred.Message, "token endpoint "+ep.srv.URL+": answered 401: invalid_client")
	require.NotContains(t, cred.Message, "push")
	require.Contains(t, rep.Sources[0].Stopped, "destination d: its token endpoint "+ep.srv.URL+" refuses the client credentials")
	require.Contains(t, b.syncer(t, "status"), "credentials REFUSED by the token endpoint "+ep.srv.URL)
	require.Contains(t, log.String(), "delivery: the token endpoint refused the client credentials, no request was sent")
	require.NotRegexp(t, `syncer_thirdparty_responses_total\{code="401",destination="d"\}`, metricsText(t, d.addr))
	// A Kubernetes Secret's update: a new file renamed over the old.
	tmp := secretFile(t, dir, "secret.new", "the-right-secret")
	require.NoError(t, os.Rename(tmp, secretPath))
	waitFor(t, 90*time.Second, "every row, once the secret is mended", func() bool { return api.fake.Stats().DistinctPairs >= 50 })
	rep, err = status.Gather(context.Background(), b.pool, nil)
	require.NoError(t, err)
	require.Zero(t, rep.Failed)
	b.requireNoSecret(t, d, log, "the-right-secret", "a-wrong-secret")
}

// Basic auth, and a token file replaced under the running daemon: the
// next requests carry the new password, with no restart.
func TestBasicAuthPasswordFileRotates(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	dir := t.TempDir()
	var mu sync.Mutex
	password := "first-password"
	api := newGuardedAPI(t, func(r *http.Request) bool {
		u, p, ok := r.BasicAuth()
		mu.Lock()
		defer mu.Unlock()
		return ok && u == "syncer" && p == password
	}, nil)
	log := &dbtest.Buffer{}
	pwPath := secretFile(t, dir, "password", "first-password")
	d := b.ordersSource(t, fmt.Sprintf(`    url: %s
    auth: {type: basic, username_file: %s, password_file: %s}
`, api.url, secretFile(t, dir, "user", "syncer"), pwPath), log)
	b.insertOrders(t, 1, 100)
	waitFor(t, 30*time.Second, "rows with the first password", func() bool { return api.fake.Stats().DistinctPairs >= 100 })
	mu.Lock()
	password = "second-password"
	mu.Unlock()
	require.NoError(t, os.Rename(secretFile(t, dir, "password.new", "second-password"), pwPath))
	time.Sleep(1500 * time.Millisecond) // the file is looked at once a second
	b.insertOrders(t, 101, 100)
	waitFor(t, 60*time.Second, "rows with the second password", func() bool { return api.fake.Stats().DistinctPairs >= 200 })
	_, headers := api.seen()
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte("syncer:second-password"))
	require.Equal(t, want, headers[len(headers)-1])
	require.Contains(t, log.String(), "a secret's file changed", "the rotation is logged, by name")
	rep, err := status.Gather(context.Background(), b.pool, nil)
	require.NoError(t, err)
	require.Zero(t, rep.Failed)
	b.requireNoSecret(t, d, log, "first-password", "second-password")
}

// testCA is a CA of the test's, with the certificates it signs.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "syncer test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a certificate and key, PEM, for a server at 127.0.0.1 or a
// client.
func (ca *testCA) issue(t *testing.T, serial int64, server bool) (certPEM, keyPEM []byte) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "syncer test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// An HTTPS API behind a private CA that requires a client certificate
// signed by it: without one nothing is accepted, with one every row is;
// the certificate's expiry is a metric.
func TestMutualTLSPrivateCA(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	dir := t.TempDir()
	serverCert, serverKey := ca.issue(t, 2, true)
	pair, err := tls.X509KeyPair(serverCert, serverKey)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	api := newGuardedAPI(t, nil, &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool})
	caFile := filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(caFile, ca.pem, 0o600))
	clientCert, clientKey := ca.issue(t, 3, false)
	certFile, keyFile := filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	require.NoError(t, os.WriteFile(certFile, clientCert, 0o600))
	require.NoError(t, os.WriteFile(keyFile, clientKey, 0o600))

	t.Run("without a client certificate", func(t *testing.T) {
		b := setup(t, fakethirdparty.Config{})
		b.ordersSource(t, fmt.Sprintf("    url: %s\n    tls: {ca_file: %s, system_roots: false}\n", api.url, caFile), &dbtest.Buffer{})
		b.insertOrders(t, 1, 20)
		time.Sleep(3 * time.Second)
		require.Zero(t, api.fake.Stats().DistinctPairs, "refused at the handshake")
	})
	t.Run("with one", func(t *testing.T) {
		b := setup(t, fakethirdparty.Config{})
		d := b.ordersSource(t, fmt.Sprintf("    url: %s\n    tls: {ca_file: %s, cert_file: %s, key_file: %s, min_version: \"1.2\"}\n",
			api.url, caFile, certFile, keyFile), &dbtest.Buffer{})
		b.insertOrders(t, 1, 20)
		waitFor(t, 30*time.Second, "every row over mutual TLS", func() bool { return api.fake.Stats().DistinctPairs >= 20 })
		waitFor(t, 30*time.Second, "the certificate's expiry as a metric", func() bool {
			resp, err := http.Get("http://" + d.addr + "/metrics")
			require.NoError(t, err)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return strings.Contains(string(body), `syncer_destination_certificate_expiry_timestamp_seconds{destination="d"}`)
		})
		// The test CA's certificates end within a day: status says so.
		waitFor(t, 30*time.Second, "the near expiry in status", func() bool {
			rep, err := status.Gather(context.Background(), b.pool, nil)
			require.NoError(t, err)
			for _, dst := range rep.Destinations {
				if c := dst.Certificate; c != nil && time.Until(c.NotAfter) < status.CertificateWarning {
					return true
				}
			}
			return false
		})
	})
}

// replaceFile replaces path with value the way a Secret update does: a new
// file renamed over the old.
func replaceFile(dir, path, value string) error {
	tmp, err := os.CreateTemp(dir, "new-*")
	if err != nil {
		return err
	}
	if _, err := tmp.WriteString(value + "\n"); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// newRecvHandler serves h on loopback and returns its URL.
func newRecvHandler(t *testing.T, h http.HandlerFunc) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// newRecvServer accepts every request (204) after handing its body to
// got, and returns its URL.
func newRecvServer(t *testing.T, got func([]byte)) string {
	return newRecvHandler(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got(body)
		w.WriteHeader(http.StatusNoContent)
	})
}

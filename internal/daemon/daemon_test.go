package daemon_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/migrations"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type bundle struct {
	pool    *pgxpool.Pool
	fakeURL string
}

func setup(t *testing.T, migrated bool) *bundle {
	t.Helper()
	pool := dbtest.NewPool(t)
	if migrated {
		_, err := migrations.Up(context.Background(), pool, nil)
		require.NoError(t, err)
	}
	srv := httptest.NewServer(fakethirdparty.New(fakethirdparty.Config{}))
	t.Cleanup(srv.Close)
	return &bundle{pool: pool, fakeURL: srv.URL}
}

// start runs a daemon until the test ends and returns its HTTP address.
func (b *bundle) start(t *testing.T, cfg *daemon.Config) string {
	t.Helper()
	ready := make(chan string, 1)
	cfg.ThirdParty.URL = b.fakeURL
	cfg.Ready = func(addr string) { ready <- addr }
	d, err := daemon.New(t.Context(), b.pool, cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	select {
	case addr := <-ready:
		return addr
	case err := <-done:
		t.Fatalf("daemon did not start: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("daemon did not start in 30s")
	}
	return ""
}

func get(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

func TestNewValidatesAndChecksTheSchema(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	for _, tt := range []struct {
		name string
		cfg  *daemon.Config
		want string
	}{
		{"nil config", nil, "ThirdParty.URL is required"},
		{"negative workers", &daemon.Config{ThirdParty: thirdpartyURL(b.fakeURL), Workers: -1}, "Workers must not be negative"},
		{"bad address", &daemon.Config{ThirdParty: thirdpartyURL(b.fakeURL), HTTPAddr: "nowhere"}, "HTTPAddr"},
		{"unmigrated", &daemon.Config{ThirdParty: thirdpartyURL(b.fakeURL)}, "run `syncer migrate`"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := daemon.New(t.Context(), b.pool, tt.cfg)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestServesHealthMetricsAndPprofWithoutCmdline(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	addr := b.start(t, &daemon.Config{HTTPAddr: "127.0.0.1:0", Pprof: true})

	code, _ := get(t, "http://"+addr+"/healthz")
	require.Equal(t, http.StatusOK, code)
	code, _ = get(t, "http://"+addr+"/readyz")
	require.Equal(t, http.StatusOK, code)
	code, body := get(t, "http://"+addr+"/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Regexp(t, `(?m)^syncer_build_info\{commit="[^"]+",goversion="go[^"]+",version="[^"]+"\} 1$`, body)

	code, _ = get(t, "http://"+addr+"/debug/pprof/")
	require.Equal(t, http.StatusOK, code)
	code, body = get(t, "http://"+addr+"/debug/pprof/cmdline")
	require.Equal(t, http.StatusNotFound, code)
	require.NotContains(t, body, ".test")
}

func TestHTTPAddrOffServesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	addr := b.start(t, &daemon.Config{HTTPAddr: daemon.HTTPAddrOff})
	require.Empty(t, addr)
}

func TestCheckHTTPAddr(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{":8080", "0.0.0.0:8080", "127.0.0.1:0", "[::1]:9090", "localhost:http"} {
		require.NoError(t, daemon.CheckHTTPAddr(ok), ok)
	}
	for _, bad := range []string{"", "8080", "localhost", "host:port:1", ":notaport"} {
		err := daemon.CheckHTTPAddr(bad)
		require.Error(t, err, bad)
		require.True(t, strings.Contains(err.Error(), "host:port") || strings.Contains(err.Error(), "port"), err.Error())
	}
}

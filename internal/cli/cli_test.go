package cli_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/cli"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/locks"
	"github.com/syncer-dev/syncer/internal/replays"
	"github.com/syncer-dev/syncer/internal/resources"
	"github.com/syncer-dev/syncer/migrations"
)

type result struct {
	code           int
	stdout, stderr string
}

// run runs the command line in this process. Settings go as flags: the
// environment is the process's, shared by parallel tests.
func run(ctx context.Context, args ...string) result {
	var stdout, stderr dbtest.Buffer
	code := cli.Main(ctx, args, &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

// oneLine asserts that stderr is one line holding want.
func oneLine(t *testing.T, r result, want string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	require.Len(t, lines, 1, "one line: %q", r.stderr)
	require.Contains(t, lines[0], want)
}

type bundle struct {
	dsn, schema string
	pool        *pgxpool.Pool
}

// setup returns a migrated schema, or an empty one when migrated is false.
func setup(t *testing.T, migrated bool) *bundle {
	t.Helper()
	dsn, schema := dbtest.NewSchema(t)
	pool, err := pgxpool.New(context.Background(), dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	if migrated {
		_, err = migrations.Up(context.Background(), pool, nil)
		require.NoError(t, err)
	}
	return &bundle{dsn: dsn, schema: schema, pool: pool}
}

func (b *bundle) fill(t *testing.T, n int) {
	t.Helper()
	_, err := b.pool.Exec(context.Background(), `INSERT INTO resources (payload)
		SELECT jsonb_build_object('n', g) FROM generate_series(1, $1) g`, n)
	require.NoError(t, err)
}

func TestVersion(t *testing.T) {
	t.Parallel()
	r := run(t.Context(), "version")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `^syncer \S+ \(commit \S+, go\S+\)\n$`, r.stdout)

	r = run(t.Context(), "version", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var got map[string]string
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got))
	for _, k := range []string{"version", "commit", "go_version"} {
		require.NotEmpty(t, got[k], k)
	}
}

func TestMalformedDatabaseURLExits2WithoutThePassword(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, url, reason string
	}{
		{"bad port", "postgres://alice:s3cr3t-pw@db.example:abc/app", "invalid port"},
		{"bad option", "postgres://alice:s3cr3t-pw@db.example/app?sslmode=sometimes", "sslmode is invalid"},
		{"not a URL", "alice:s3cr3t-pw at db.example", "invalid keyword/value"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, cmd := range [][]string{{"status"}, {"migrate"}, {"replay", "--list"}, {"retry-failed"}, {"run", "--thirdparty-url", "http://127.0.0.1:9"}} {
				r := run(t.Context(), append(cmd, "--database-url", tt.url)...)
				require.Equal(t, 2, r.code, "%v: %s", cmd, r.stderr)
				oneLine(t, r, "--database-url (DATABASE_URL) is malformed: ")
				require.Contains(t, r.stderr, tt.reason)
				require.NotContains(t, r.stderr, "s3cr3t-pw")
			}
		})
	}
}

func TestDatabaseURLFile(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	dir := t.TempDir()
	file := filepath.Join(dir, "url")
	require.NoError(t, os.WriteFile(file, []byte(b.dsn+"\n"), 0o600))

	r := run(t.Context(), "status", "--json", "--database-url-file", file)
	require.Equal(t, 0, r.code, r.stderr)

	r = run(t.Context(), "status", "--database-url-file", file, "--database-url", b.dsn)
	require.Equal(t, 2, r.code)
	oneLine(t, r, "exclusive")

	r = run(t.Context(), "status", "--database-url-file", filepath.Join(dir, "missing"))
	require.Equal(t, 2, r.code)
	oneLine(t, r, "--database-url-file (DATABASE_URL_FILE): cannot read")
}

func TestUnmigratedDatabaseSaysToMigrate(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	for _, cmd := range [][]string{
		{"status"},
		{"status", "--json"},
		{"replay", "--from-id", "1"},
		{"replay", "--list"},
		{"replay", "--cancel", "1"},
		{"retry-failed"},
		{"run", "--thirdparty-url", "http://127.0.0.1:9", "--http-addr", "off"},
	} {
		r := run(t.Context(), append(cmd, "--database-url", b.dsn)...)
		require.Equal(t, 1, r.code, "%v: %s", cmd, r.stderr)
		oneLine(t, r, "run `syncer migrate`")
		require.NotContains(t, r.stderr, "does not exist", "%v", cmd)
	}
	r := run(t.Context(), "migrate", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stderr)
	r = run(t.Context(), "status", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stderr)
}

func TestRunSettings(t *testing.T) {
	t.Parallel()
	db := []string{"--database-url", "postgres://127.0.0.1:5432/test", "--thirdparty-url", "http://127.0.0.1:9"}
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(token, []byte("t0ken\r\n"), 0o600))
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.WriteFile(empty, []byte("\n"), 0o600))
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"token and token file", []string{"--thirdparty-token", "x", "--thirdparty-token-file", token},
			"--thirdparty-token (SYNCER_THIRDPARTY_TOKEN) and --thirdparty-token-file (SYNCER_THIRDPARTY_TOKEN_FILE) are exclusive"},
		{"missing token file", []string{"--thirdparty-token-file", filepath.Join(dir, "nope")}, "--thirdparty-token-file (SYNCER_THIRDPARTY_TOKEN_FILE): cannot read"},
		{"empty token file", []string{"--thirdparty-token-file", empty}, "is empty"},
		{"zero workers", []string{"--workers", "0"}, "--workers (SYNCER_WORKERS) must be positive, got 0"},
		{"negative rate", []string{"--rate-limit=-1"}, "--rate-limit (SYNCER_RATE_LIMIT) must not be negative"},
		{"zero timeout", []string{"--request-timeout", "0s"}, "--request-timeout (SYNCER_REQUEST_TIMEOUT) must be positive, got 0s"},
		{"zero hot poll", []string{"--hot-poll", "0s"}, "--hot-poll (SYNCER_HOT_POLL) must be above 0 and at most 100ms, got 0s"},
		{"long hot poll", []string{"--hot-poll", "1s"}, "--hot-poll (SYNCER_HOT_POLL) must be above 0 and at most 100ms, got 1s"},
		{"short verify period", []string{"--verify-every", "10s"}, "--verify-every (SYNCER_VERIFY_EVERY) must be 0 or at least 1m0s, got 10s"},
		{"heal without period", []string{"--verify-heal"}, "--verify-heal (SYNCER_VERIFY_HEAL) needs --verify-every (SYNCER_VERIFY_EVERY)"},
		{"empty HTTP address", []string{"--http-addr", ""}, "--http-addr (SYNCER_HTTP_ADDR): want host:port or \"off\""},
		{"bad HTTP address", []string{"--http-addr", "localhost"}, "--http-addr (SYNCER_HTTP_ADDR): want host:port"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := run(t.Context(), append(append([]string{"run"}, db...), tt.args...)...)
			require.Equal(t, 2, r.code, r.stderr)
			oneLine(t, r, tt.want)
		})
	}
}

func TestHelpShowsDefaultsFromConstantsAndWarnsAboutFlags(t *testing.T) {
	t.Parallel()
	r := run(t.Context(), "run", "--help")
	require.Equal(t, 0, r.code, r.stderr)
	for _, want := range []string{"--batch-size=500", `--http-addr="127.0.0.1:8080"`, "--shutdown-timeout=30s", "--backoff-max-elapsed=1m ", "--hot-poll=5ms",
		"off serves nothing", "(flags show in ps)", "--thirdparty-token-file", "--database-url-file"} {
		require.Contains(t, r.stdout, want)
	}
	require.NotContains(t, r.stdout, "${")
}

func TestHealthcheck(t *testing.T) {
	t.Parallel()
	var status int
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	_, port, _ := strings.Cut(addr, ":")
	set := func(s int) { mu.Lock(); status = s; mu.Unlock() }

	set(http.StatusOK)
	r := run(t.Context(), "healthcheck", "--http-addr", addr)
	require.Equal(t, 0, r.code, r.stderr)
	// A listen address with no host, or an unspecified one, is checked on
	// loopback.
	for _, a := range []string{":" + port, "0.0.0.0:" + port} {
		r = run(t.Context(), "healthcheck", "--http-addr", a)
		require.Equal(t, 0, r.code, "%s: %s", a, r.stderr)
	}

	set(http.StatusServiceUnavailable)
	r = run(t.Context(), "healthcheck", "--http-addr", addr)
	require.Equal(t, 1, r.code)
	oneLine(t, r, "503")

	srv.Close()
	r = run(t.Context(), "healthcheck", "--http-addr", addr)
	require.Equal(t, 1, r.code)
	oneLine(t, r, "healthcheck")

	r = run(t.Context(), "healthcheck", "--http-addr", "off")
	require.Equal(t, 2, r.code)
	oneLine(t, r, "serves no /healthz")
}

func TestReplayEmptyListCancel(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	b.fill(t, 10)
	db := []string{"--database-url", b.dsn}
	ctx := t.Context()

	r := run(ctx, append([]string{"replay", "--from-id", "100", "--to-id", "200"}, db...)...)
	require.Equal(t, 1, r.code)
	oneLine(t, r, "no row matches the range")
	all, err := replays.List(ctx, b.pool)
	require.NoError(t, err)
	require.Empty(t, all, "an empty replay is not created")

	r = run(ctx, append([]string{"replay", "--from-id", "100", "--dry-run"}, db...)...)
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "would send 0 rows\n", r.stdout)

	r = run(ctx, append([]string{"replay", "--from-id", "2", "--to-id", "5"}, db...)...)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "replay 1 created: 4 rows")
	r = run(ctx, append([]string{"replay", "--failed", "--from-id", "1"}, db...)...)
	require.Equal(t, 1, r.code, "no failed rows")

	r = run(ctx, append([]string{"replay", "--list"}, db...)...)
	require.Equal(t, 0, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 2, r.stdout)
	require.Regexp(t, `^ID\s+STATE\s+RANGE\s+PROGRESS\s+CREATED$`, lines[0])
	require.Regexp(t, `^1\s+pending\s+ids 2-5\s+0 of 4 rows \(0\.0%\)\s+\d{4}-`, lines[1])

	r = run(ctx, append([]string{"replay", "--cancel", "1"}, db...)...)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "replay 1 cancelled")
	state, err := replays.StateOf(ctx, b.pool, 1)
	require.NoError(t, err)
	require.Equal(t, replays.StateCancelled, state)

	r = run(ctx, append([]string{"replay", "--cancel", "1"}, db...)...)
	require.Equal(t, 1, r.code)
	oneLine(t, r, "replay 1 is cancelled")
	r = run(ctx, append([]string{"replay", "--cancel", "99"}, db...)...)
	require.Equal(t, 1, r.code)
	oneLine(t, r, "replay 99")

	for _, bad := range [][]string{{"--list", "--cancel", "1"}, {"--list", "--from-id", "1"}, {"--cancel", "1", "--wait"}, {}} {
		r = run(ctx, append(append([]string{"replay"}, bad...), db...)...)
		require.Equal(t, 2, r.code, "%v", bad)
	}

	// --source resources is resources' replay, as for any source: alone
	// the whole table, its keys ids; a key that is no id exits 2.
	r = run(ctx, append([]string{"replay", "--source", "resources", "--dry-run"}, db...)...)
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "would send 10 rows\n", r.stdout)
	r = run(ctx, append([]string{"replay", "--source", "resources", "--from-key", "3", "--to-key", "4"}, db...)...)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "replay 2 created: 2 rows")
	r = run(ctx, append([]string{"replay", "--source", "resources", "--from-key", "abc"}, db...)...)
	require.Equal(t, 2, r.code, r.stdout)
	oneLine(t, r, `"abc" is not an id of resources`)
}

func TestReplayWaitSaysWhenNoDaemonPicksItUp(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	b.fill(t, 3)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout, stderr dbtest.Buffer
	done := make(chan int, 1)
	go func() {
		done <- cli.Main(ctx, []string{"replay", "--from-id", "1", "--wait", "--poll", "20ms", "--stall", "200ms", "--database-url", b.dsn}, &stdout, &stderr)
	}()
	require.Eventually(t, func() bool {
		return strings.Contains(stdout.String(), "no daemon has picked the replay up in 200ms: is `syncer run` running? Still waiting")
	}, 30*time.Second, 20*time.Millisecond, "stdout: %s", stdout.String())

	// It keeps waiting: cancelling the replay ends the wait.
	require.NoError(t, replays.Cancel(t.Context(), b.pool, 1))
	select {
	case code := <-done:
		require.Equal(t, 1, code)
		require.Contains(t, stderr.String(), "replay 1 was cancelled")
	case <-time.After(30 * time.Second):
		t.Fatal("--wait did not end when the replay was cancelled")
	}
}

func TestStatusShowsRecentReplaysSortedJobsAndLockHolder(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	b.fill(t, 3)
	ctx := t.Context()
	var ids []int64
	for range 9 {
		id, err := replays.Create(ctx, b.pool, replays.Request{Filter: resources.Filter{FromID: 1}}, 3)
		require.NoError(t, err)
		ids = append(ids, id)
	}
	for _, id := range ids[1:] {
		_, err := replays.Finish(ctx, b.pool, id)
		require.NoError(t, err)
	}
	rc, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{Schema: b.schema})
	require.NoError(t, err)
	_, err = rc.InsertMany(ctx, []river.InsertManyParams{
		{Args: jobs.ExportArgs{Source: jobs.Resources}},
		{Args: jobs.ExportArgs{Source: jobs.Resources}, InsertOpts: &river.InsertOpts{ScheduledAt: time.Now().Add(time.Hour)}},
		{Args: jobs.PreviousSyncArgs{}},
	})
	require.NoError(t, err)

	// A session holding the export lock, named as a daemon names its own.
	u, err := url.Parse(b.dsn)
	require.NoError(t, err)
	q := u.Query()
	q.Set("application_name", "syncer run web-7:4242")
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	holder, err := pgx.Connect(ctx, u.String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = holder.Close(context.Background()) })
	_, err = holder.Exec(ctx, `SELECT pg_advisory_lock($1)`, locks.ExportKey(b.schema, jobs.Resources))
	require.NoError(t, err)

	r := run(ctx, "status", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stderr)
	var replayLines, jobLines []string
	for _, l := range strings.Split(r.stdout, "\n") {
		switch {
		case strings.HasPrefix(l, "replay "):
			replayLines = append(replayLines, strings.Fields(l)[1])
		case strings.HasPrefix(l, "job "):
			jobLines = append(jobLines, strings.Fields(l)[1])
		}
	}
	require.Equal(t, []string{"1", "5", "6", "7", "8", "9"}, replayLines, "the unfinished one and the last five finished, by id, once each:\n%s", r.stdout)
	require.Equal(t, []string{"syncer_source:available", "syncer_source:scheduled", "syncer_sync:available"}, jobLines)
	require.Contains(t, r.stdout, "held by syncer run on web-7, process 4242")
	require.Regexp(t, `(?m)^source resources +resources to default: \d+ pending, 0 failed, oldest pending \S+, 0 batches in flight; export lock held by syncer run on web-7, process 4242 `, r.stdout,
		"resources' line is a source's, its lock holder with it")
	require.Regexp(t, `(?m)^destination default +breaker closed`, r.stdout)
	require.NotContains(t, r.stdout, "checkpoint replay:2")
}

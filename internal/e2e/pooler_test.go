package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/locks"
)

// poolerBundle is a fresh, unmigrated schema, a pool on it straight to
// PostgreSQL (for the test's own reads and writes), a PgBouncer in front of
// it and a fake third party.
type poolerBundle struct {
	*bundle
	schema string
	// viaPooler is the schema's URL through the PgBouncer.
	viaPooler string
	pgb       *dbtest.PgBouncer
}

func setupPooler(t *testing.T, mode string) *poolerBundle {
	t.Helper()
	return newPoolerBundle(t, func(dsn, _ string) (string, *dbtest.PgBouncer) {
		pgb := dbtest.StartPgBouncer(t, mode)
		return pgb.URL(t, dsn), pgb
	})
}

// newPoolerBundle makes the schema, its pool and the fake, and puts the
// PgBouncer start gives in front of the schema, whose URL straight to
// PostgreSQL is dsn: the URL through it and the PgBouncer.
func newPoolerBundle(t *testing.T, start func(dsn, schema string) (string, *dbtest.PgBouncer)) *poolerBundle {
	t.Helper()
	dsn, schema := dbtest.NewSchema(t)
	pool, err := pgxpool.New(context.Background(), dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	fake := fakethirdparty.New(fakethirdparty.Config{})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	viaPooler, pgb := start(dsn, schema)
	return &poolerBundle{
		bundle:    &bundle{pool: pool, dsn: dsn, fake: fake, fakeURL: srv.URL},
		schema:    schema,
		viaPooler: viaPooler,
		pgb:       pgb,
	}
}

// syncer runs a command of the binary to its end and returns its exit
// status and what it wrote.
func syncerCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(syncerBinary(t), args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("run syncer %v: %v", args, err)
	}
	return code, out.String(), errOut.String()
}

// startRun starts `syncer run` on dbURL and returns it with its stderr.
func (b *bundle) startRun(t *testing.T, dbURL string, extra ...string) (*exec.Cmd, *dbtest.Buffer) {
	t.Helper()
	args := append([]string{"run", "--database-url", dbURL, "--thirdparty-url", b.fakeURL,
		"--http-addr", freePort(t), "--batch-size", "200", "--log-level", "warn"}, extra...)
	cmd := exec.Command(syncerBinary(t), args...)
	errOut := &dbtest.Buffer{}
	cmd.Stderr = errOut
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, errOut
}

func (b *poolerBundle) exportLockHeld(t *testing.T) (locks.Holder, bool) {
	t.Helper()
	h, held, err := locks.HolderOf(context.Background(), b.pool, locks.ExportKey(b.schema, jobs.Resources))
	require.NoError(t, err)
	return h, held
}

// advisoryLocks counts the advisory locks held by the schema's sessions
// (the test's URLs name them after the schema; a pooler's server sessions
// keep the name of their last client), and the export lock by anyone.
// Migrate's lock is not per schema: other tests hold it too.
func (b *poolerBundle) advisoryLocks(t *testing.T) int64 {
	t.Helper()
	var n int64
	ek := locks.ExportKey(b.schema, jobs.Resources)
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks l
		LEFT JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted
		  AND (a.application_name = $2 OR (l.objsubid = 1
		    AND (l.classid, l.objid) = (($1::bigint >> 32) & 4294967295, $1::bigint & 4294967295)))`, ek, b.schema).Scan(&n))
	return n
}

// Through PgBouncer in session mode, with its stock settings (no startup
// parameter but the few it tracks): migrate, status and run work, every
// row is delivered once, and no lock outlives a daemon, however it exits.
func TestPgBouncerSessionPooling(t *testing.T) {
	t.Parallel()
	b := setupPooler(t, "session")
	const rows, more = 5000, 2000

	code, _, errOut := syncerCmd(t, "migrate", "--database-url", b.viaPooler)
	require.Equal(t, 0, code, "migrate: %s\npgbouncer:\n%s", errOut, b.pgb.Log())
	code, _, errOut = syncerCmd(t, "migrate", "--database-url", b.viaPooler)
	require.Equal(t, 0, code, "a second migrate: %s", errOut)
	b.exec(t, `INSERT INTO resources (payload) SELECT jsonb_build_object('n', g) FROM generate_series(1, $1) g`, rows)

	code, out, errOut := syncerCmd(t, "status", "--json", "--database-url", b.viaPooler)
	require.Equal(t, 0, code, "status: %s", errOut)
	var st struct{ Total, Unsynced int64 }
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	require.Equal(t, int64(rows), st.Total)
	require.Equal(t, int64(rows), st.Unsynced)

	start := time.Now()
	cmd, runErr := b.startRun(t, b.viaPooler)
	b.waitAllSynced(t, 2*time.Minute)
	t.Logf("session pooling: %d rows exported in %.1fs", rows, time.Since(start).Seconds())
	fs := b.fake.Stats()
	require.Equal(t, int64(rows), fs.DistinctPairs, "every row delivered")
	require.Zero(t, fs.DuplicatePairs, "no row delivered twice")
	require.NotContains(t, runErr.String(), "unsupported startup parameter")

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), runErr.String())
	require.Zero(t, b.advisoryLocks(t), "no lock left held after SIGTERM")

	// SIGKILL: PgBouncer's server_reset_query (DISCARD ALL) drops the
	// session's locks when it takes the server session back.
	b.exec(t, `INSERT INTO resources (payload) SELECT jsonb_build_object('m', g) FROM generate_series(1, $1) g`, more)
	cmd, runErr = b.startRun(t, b.viaPooler)
	waitFor(t, time.Minute, "the export lock taken", func() bool { _, held := b.exportLockHeld(t); return held })
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	waitFor(t, 10*time.Second, "no lock left held after SIGKILL", func() bool { return b.advisoryLocks(t) == 0 })

	cmd, runErr = b.startRun(t, b.viaPooler)
	b.waitAllSynced(t, 2*time.Minute)
	fs = b.fake.Stats()
	t.Logf("session pooling, across a SIGKILL: %d pairs accepted, %d requests, %d duplicates under another key",
		fs.DistinctPairs, fs.Requests, fs.DuplicatesOtherKey)
	require.Equal(t, int64(rows+more), fs.DistinctPairs)
	require.Zero(t, fs.DuplicatesOtherKey, "no pair under two keys")
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), runErr.String())
	require.Zero(t, b.advisoryLocks(t))
}

// Through PgBouncer in statement mode every command refuses at start with
// one line naming the pooler and the fix, exits 2, and leaves no lock on
// any of the pooler's server sessions. (Transaction mode works, with or
// without SYNCER_DIRECT_URL: pooler_tx_test.go, pooler_leases_test.go.)
func TestPgBouncerStatementPoolingRefused(t *testing.T) {
	t.Parallel()
	b := setupPooler(t, "statement")
	for _, args := range [][]string{
		{"migrate", "--database-url", b.viaPooler},
		{"status", "--json", "--database-url", b.viaPooler},
		{"run", "--database-url", b.viaPooler, "--thirdparty-url", b.fakeURL, "--http-addr", freePort(t)},
		// No SYNCER_DIRECT_URL makes a statement pooler work.
		{"status", "--database-url", b.viaPooler, "--direct-url", b.dsn},
	} {
		code, _, errOut := syncerCmd(t, args...)
		require.Equal(t, 2, code, "%s: %s", args[0], errOut)
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		require.Len(t, lines, 1, "%s: one line: %s", args[0], errOut)
		require.Contains(t, lines[0], "transaction or statement pooling", args[0])
		require.Contains(t, lines[0], "pool_mode=statement", args[0])
		require.Contains(t, lines[0], "use pool_mode=transaction or pool_mode=session", "names the fix")
		require.Contains(t, lines[0], "DATABASE_URL", args[0])
		u, err := url.Parse(b.viaPooler)
		require.NoError(t, err)
		require.Contains(t, lines[0], "port="+u.Port(), "names where the URL points")
	}
	require.Zero(t, b.advisoryLocks(t), "no lock left held on a pooled session")
	require.Zero(t, b.fake.Stats().Requests)
}

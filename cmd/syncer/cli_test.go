package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

func TestConfigurationErrors(t *testing.T) {
	t.Parallel()
	db := "DATABASE_URL=postgres://127.0.0.1:5432/test"
	for _, tt := range []struct {
		name  string
		env   []string
		args  []string
		code  int
		names string
	}{
		{"missing third-party URL", []string{db}, []string{"run"}, 2, "--thirdparty-url (SYNCER_THIRDPARTY_URL)"},
		{"negative batch size", []string{db, "SYNCER_THIRDPARTY_URL=http://127.0.0.1:1", "SYNCER_BATCH_SIZE=-5"}, []string{"run"}, 2, "--batch-size (SYNCER_BATCH_SIZE)"},
		{"negative batch size flag", []string{db}, []string{"run", "--thirdparty-url", "http://x", "--batch-size=-5"}, 2, "--batch-size"},
		{"unknown flag", []string{db}, []string{"run", "--bogus"}, 2, "--bogus"},
		{"unknown command", nil, []string{"frobnicate"}, 2, "frobnicate"},
		{"missing database", nil, []string{"status"}, 2, "--database-url (DATABASE_URL)"},
		{"bad duration", []string{db, "SYNCER_THIRDPARTY_URL=http://x", "SYNCER_SHUTDOWN_TIMEOUT=soon"}, []string{"run"}, 2, "shutdown-timeout"},
		{"malformed DATABASE_URL", []string{"DATABASE_URL=postgres://alice:s3cr3t-pw@127.0.0.1:abc/app"}, []string{"status"}, 2, "--database-url (DATABASE_URL) is malformed"},
		{"malformed DATABASE_URL for run", []string{"DATABASE_URL=postgres://alice:s3cr3t-pw@127.0.0.1/app?sslmode=maybe", "SYNCER_THIRDPARTY_URL=http://x"}, []string{"run"}, 2, "--database-url (DATABASE_URL) is malformed"},
		{"token twice", []string{db, "SYNCER_THIRDPARTY_URL=http://x", "SYNCER_THIRDPARTY_TOKEN=t", "SYNCER_THIRDPARTY_TOKEN_FILE=/etc/hostname"}, []string{"run"}, 2, "exclusive"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := run(t, tt.env, tt.args...)
			require.Equal(t, tt.code, r.code, "stderr: %s", r.stderr)
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			require.Len(t, lines, 1, "one line: %q", r.stderr)
			require.Contains(t, lines[0], tt.names)
			require.NotContains(t, r.stderr, "s3cr3t-pw")
		})
	}
}

func TestUnreachableDatabaseNamesHostNotPassword(t *testing.T) {
	t.Parallel()
	// Port 1 on loopback refuses at once.
	r := run(t, []string{"DATABASE_URL=postgres://alice:s3cr3t-pw@127.0.0.1:1/app", "SYNCER_THIRDPARTY_URL=http://127.0.0.1:9"}, "run")
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "127.0.0.1")
	require.NotContains(t, r.stderr, "s3cr3t-pw")
	require.Len(t, strings.Split(strings.TrimSpace(r.stderr), "\n"), 1, r.stderr)
	require.NotContains(t, r.stderr, "goroutine")
}

func TestHelpOnEveryCommand(t *testing.T) {
	t.Parallel()
	for _, c := range []string{"migrate", "run", "replay", "status", "retry-failed", "version", "healthcheck"} {
		r := run(t, nil, c, "--help")
		require.Equal(t, 0, r.code, c)
		require.Contains(t, r.stdout, "Usage: syncer "+c)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	r := run(t, nil, "version")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `^syncer \S+ \(commit \S+, go\S+\)\n$`, r.stdout)
}

func TestHealthcheckAgainstTheDaemon(t *testing.T) {
	t.Parallel()
	e := setup(t, fakethirdparty.Config{})
	cmd, addr := e.daemonAt(t)
	require.Eventually(t, func() bool {
		return run(t, []string{"SYNCER_HTTP_ADDR=" + addr}, "healthcheck").code == 0
	}, 30*time.Second, 50*time.Millisecond)
	// The daemon's own metrics say which build runs.
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Contains(t, string(b), "\nsyncer_build_info{")

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait())
	r := run(t, []string{"SYNCER_HTTP_ADDR=" + addr}, "healthcheck")
	require.Equal(t, 1, r.code, "no daemon, no health")
	require.Len(t, strings.Split(strings.TrimSpace(r.stderr), "\n"), 1, r.stderr)
}

func TestStatusJSONAgainstAHandFilledDatabase(t *testing.T) {
	t.Parallel()
	e := setup(t, fakethirdparty.Config{})
	ctx := context.Background()
	_, err := e.pool.Exec(ctx, `INSERT INTO resources (payload, synced_at, failed_at, sync_error, changed_at) VALUES
		('{"a":1}', now(), NULL, NULL, now()),
		('{"a":2}', now(), NULL, NULL, now()),
		('{"a":3}', NULL, NULL, NULL, now() - interval '90 seconds'),
		('{"a":4}', NULL, NULL, NULL, now() - interval '10 seconds'),
		('{"a":5}', NULL, now(), 'field a is not allowed', now())`)
	require.NoError(t, err)

	r := run(t, []string{"DATABASE_URL=" + e.dsn}, "status", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got))
	for _, k := range []string{"total", "unsynced", "synced", "failed", "outbox_pending"} {
		require.IsType(t, float64(0), got[k], k)
		require.Equal(t, got[k], float64(int64(got[k].(float64))), "%s is an integer", k)
	}
	require.Equal(t, float64(5), got["total"])
	require.Equal(t, float64(3), got["unsynced"])
	require.Equal(t, float64(2), got["synced"])
	require.Equal(t, float64(1), got["failed"])
	// No daemon is alive, so the gate's lease has lapsed and the inserts
	// appended no event: the next daemon finds the rows by itself.
	require.Equal(t, float64(0), got["outbox_pending"])
	age := got["oldest_unsynced_age_seconds"].(float64)
	require.InDelta(t, 90, age, 5)

	r = run(t, []string{"DATABASE_URL=" + e.dsn}, "status")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "field a is not allowed")
}

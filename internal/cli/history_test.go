package cli_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/history"
)

// TestHistoryCommand: syncer history prints a key's story as text and as
// JSON, says when there is none, and refuses a key of resources that is
// not a row id (exit 2, naming the flag).
func TestHistoryCommand(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t, true)
	at := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	it := feed.Item{ID: "42", Version: 3}
	qb := &pgx.Batch{}
	history.Queue(qb, &history.Batch{Feed: "resources", Destination: "default", BatchedAt: at,
		Attempts: []delivery.Attempt{
			{Key: "syncer-k1", At: at, Latency: 30 * time.Millisecond, Status: 503, Reason: "503 unavailable", Items: []feed.Item{it}},
			{Key: "syncer-k1", At: at.Add(time.Second), Latency: 12 * time.Millisecond, Status: 200, Items: []feed.Item{it}},
		},
		Rejected: []delivery.Rejection{{Item: it, Error: "email is invalid"}}})
	require.NoError(t, b.pool.SendBatch(ctx, qb).Close())

	r := run(ctx, "history", "--database-url", b.dsn, "--key", "42")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "resources key 42: 1 version\n")
	require.Contains(t, r.stdout, "version 3: failed\n")
	require.Regexp(t, `2026-11-28T10:00:00Z\s+retried\s+default\s+HTTP 503\s+30 ms\s+syncer-k1`, r.stdout)
	require.Contains(t, r.stdout, "reason: 503 unavailable")
	require.Regexp(t, `2026-11-28T10:00:01Z\s+failed\s+default\s+HTTP 200\s+12 ms\s+syncer-k1`, r.stdout)
	require.Contains(t, r.stdout, "reason: email is invalid")

	r = run(ctx, "history", "--database-url", b.dsn, "--key", "42", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var st history.Story
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.Len(t, st.Versions, 1)
	require.Equal(t, history.Failed, st.Versions[0].Settled)
	require.Len(t, st.Versions[0].Entries, 2)
	require.Equal(t, 503, *st.Versions[0].Entries[0].Status)
	require.Equal(t, "email is invalid", st.Versions[0].Entries[1].Reason)

	r = run(ctx, "history", "--database-url", b.dsn, "--key", "43")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "resources key 43: no history")

	r = run(ctx, "history", "--database-url", b.dsn, "--key", "abc")
	require.Equal(t, 2, r.code)
	oneLine(t, r, "--key of resources is a row id")

	r = run(ctx, "history", "--database-url", b.dsn, "--source", "nosuch", "--key", "1")
	require.Equal(t, 1, r.code)
}

package cli_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/sources"
)

// TestStatusLeadsWithWhatIsConfigured: with sources, status begins with
// each source and each destination (its own breaker, credentials, pause,
// learnt rate, requests in flight, last error), and shows resources' lines
// only once resources is exported; --json keeps the contract's keys.
func TestStatusLeadsWithWhatIsConfigured(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupConfigured(t, `CREATE TABLE orders (id bigint PRIMARY KEY, status text);
		CREATE TABLE customers (id uuid PRIMARY KEY, name text)`, `destinations:
  crm:
    url: http://127.0.0.1:1
  warehouse:
    url: http://127.0.0.1:2
sources:
  - table: orders
    key: id
    destination: crm
    snapshot: false
  - table: customers
    key: id
    destination: warehouse
    snapshot: false
`)
	_, err := b.pool.Exec(ctx, `INSERT INTO orders SELECT g, 'new' FROM generate_series(1, 3) g`)
	require.NoError(t, err)

	crm, err := breakerstore.New(b.pool, &breakerstore.Config{Namespace: breakerstore.DestinationNamespace("crm")})
	require.NoError(t, err)
	_, err = crm.SetRefusal(ctx, breakerstore.KeyCredentials, breakerstore.Refusal{Refused: true, Status: 401, Message: "401 Unauthorized"})
	require.NoError(t, err)
	wh, err := breakerstore.New(b.pool, &breakerstore.Config{Namespace: breakerstore.DestinationNamespace("warehouse")})
	require.NoError(t, err)
	require.NoError(t, wh.SetBreaker(ctx, breakerstore.Breaker{State: gobreaker.StateOpen, Expiry: time.Now().Add(time.Minute)}))
	require.NoError(t, wh.SetRate(ctx, breakerstore.Rate{Limit: 7.5, Ceiling: 10}))
	require.NoError(t, wh.SetLastError(ctx, breakerstore.LastError{Text: "503 Service Unavailable", Status: 503, At: time.Now()}))

	r := run(ctx, "status", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.GreaterOrEqual(t, len(lines), 4, r.stdout)
	require.Regexp(t, `^source customers +`+b.schema+`\.customers to warehouse: 0 pending, 0 failed, .*; STOPPED: destination warehouse: circuit breaker open until `, lines[0])
	require.Regexp(t, `^source orders +`+b.schema+`\.orders to crm: 3 pending, 0 failed, oldest pending [0-9.]+m?s, 0 batches in flight, snapshot skipped; STOPPED: destination crm refuses the credentials: 401 Unauthorized$`, lines[1])
	require.Regexp(t, `^destination crm +breaker closed, credentials REFUSED since \S+: 401 Unauthorized, 0 requests in flight$`, lines[2])
	require.Regexp(t, `^destination warehouse +breaker open until \S+, credentials ok, learnt rate 7.5 requests/s \(limit found near 10.0/s, probing past it\), 0 requests in flight, last error \S+: 503 Service Unavailable$`, lines[3])
	require.NotContains(t, r.stdout, "rows ", "resources is not exported: no resources lines")
	require.NotContains(t, r.stdout, "export lock")

	r = run(ctx, "status", "--database-url", b.dsn, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var raw map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &raw))
	for _, k := range []string{"total", "unsynced", "synced", "failed", "outbox_pending"} {
		var n int64
		require.NoError(t, json.Unmarshal(raw[k], &n), "key %s is an integer", k)
	}
	var age float64
	require.NoError(t, json.Unmarshal(raw["oldest_unsynced_age_seconds"], &age))
	var st struct {
		Unsynced          int64 `json:"unsynced"`
		ResourcesExported bool  `json:"resources_exported"`
		Destinations      []struct {
			Name        string                  `json:"name"`
			Sources     []string                `json:"sources"`
			Breaker     struct{ State string }  `json:"breaker"`
			Credentials breakerstore.Refusal    `json:"credentials"`
			Rate        *breakerstore.Rate      `json:"learned_rate"`
			InFlight    *int                    `json:"requests_in_flight"`
			LastError   *breakerstore.LastError `json:"last_error"`
		} `json:"destinations"`
		Sources []struct {
			Name    string `json:"name"`
			Stopped string `json:"stopped"`
		} `json:"sources"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.Equal(t, int64(3), st.Unsynced)
	require.False(t, st.ResourcesExported)
	require.Len(t, st.Destinations, 2)
	require.Equal(t, "crm", st.Destinations[0].Name)
	require.Equal(t, []string{"orders"}, st.Destinations[0].Sources)
	require.True(t, st.Destinations[0].Credentials.Refused)
	require.NotNil(t, st.Destinations[0].InFlight)
	require.Equal(t, "warehouse", st.Destinations[1].Name)
	require.Equal(t, "open", st.Destinations[1].Breaker.State)
	require.NotNil(t, st.Destinations[1].Rate)
	require.NotNil(t, st.Destinations[1].LastError)
	require.Contains(t, st.Sources[1].Stopped, "destination crm refuses the credentials")

	// Once resources holds rows, its lines follow the sources'.
	b.fill(t, 2)
	r = run(ctx, "status", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "\nrows ")
	require.Less(t, strings.Index(r.stdout, "destination warehouse"), strings.Index(r.stdout, "\nrows "))
	require.Contains(t, r.stdout, "export lock")
}

// TestStatusFailureLineKeepsTheTableNarrow: a failed key with a long key
// and a long reason neither widens the table's lines (the failures come
// after it, out of its columns) nor runs on: its reason is cut.
func TestStatusFailureLineKeepsTheTableNarrow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupConfigured(t, `CREATE TABLE tags (name text PRIMARY KEY, color text)`,
		"destinations:\n  crm:\n    url: http://127.0.0.1:1\nsources:\n  - table: tags\n    key: name\n    destination: crm\n    snapshot: false\n")
	all, err := sources.Load(ctx, b.pool)
	require.NoError(t, err)
	require.Len(t, all, 1)
	long := strings.Repeat("k", 80)
	reason := "field color is not allowed: " + strings.Repeat("x", 2000)
	require.NoError(t, sources.MarkFailed(ctx, b.pool, all[0], []string{long}, []int64{1}, []string{reason}))

	r := run(ctx, "status", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	// "destination crm" is the longest label: the values start 2 after it.
	require.Regexp(t, `^source tags {6}\S`, lines[0])
	require.Regexp(t, `^destination crm {2}\S`, lines[1])
	i := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, "failed key "+long) })
	require.Positive(t, i, r.stdout)
	require.Equal(t, "recent failures, latest first:", lines[i-1])
	require.Contains(t, lines[i], "field color is not allowed: xxx")
	require.True(t, strings.HasSuffix(lines[i], "… (cut; syncer status --json has it whole)"), lines[i])
	require.Less(t, len(lines[i]), 500)

	r = run(ctx, "status", "--database-url", b.dsn, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, strings.Repeat("x", 1000), "--json has the reason whole (as stored)")
}

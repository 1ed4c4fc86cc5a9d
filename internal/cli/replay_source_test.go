package cli_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// TestSourceReplays: replay --source with key ranges of integer, text and
// uuid keys, a time range on the source's changed_at column, --dry-run,
// --wait, --list and --cancel, against the real PostgreSQL, a daemon and
// the fake third party; flags that do not apply are refused with exit 2.
func TestSourceReplays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, false)
	_, err := b.pool.Exec(ctx, `
		CREATE TABLE orders (id integer PRIMARY KEY, status text, updated_at timestamptz NOT NULL);
		CREATE TABLE notes (id text COLLATE "en_US" PRIMARY KEY, body text);
		CREATE TABLE customers (id uuid PRIMARY KEY, name text)`)
	if err != nil && strings.Contains(err.Error(), "collation") {
		_, err = b.pool.Exec(ctx, `
			CREATE TABLE orders (id integer PRIMARY KEY, status text, updated_at timestamptz NOT NULL);
			CREATE TABLE notes (id text PRIMARY KEY, body text);
			CREATE TABLE customers (id uuid PRIMARY KEY, name text)`)
	}
	require.NoError(t, err)

	fake := fakethirdparty.New(fakethirdparty.Config{})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	cfg := filepath.Join(t.TempDir(), "syncer.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`destinations:
  crm:
    url: %s
sources:
  - table: orders
    key: id
    destination: crm
    changed_at: updated_at
  - table: notes
    key: id
    destination: crm
  - table: customers
    key: id
    destination: crm
`, srv.URL)), 0o600))
	db := []string{"--database-url", b.dsn, "--log-level", "error", "--config", cfg}
	cmd := func(args ...string) result { return run(ctx, append(args, db...)...) }
	r := cmd("migrate")
	require.Equal(t, 0, r.code, r.stderr)

	// orders 1..20, changed an hour apart (2 and 3 in the last hour);
	// notes in mixed case; customers with known uuids.
	_, err = b.pool.Exec(ctx, `
		INSERT INTO orders SELECT g, 'new', now() - (g || ' hours')::interval FROM generate_series(1, 20) g;
		INSERT INTO notes VALUES ('a', ''), ('B', ''), ('b', ''), ('c', ''), ('C', '');
		INSERT INTO customers SELECT ('00000000-0000-0000-0000-0000000000' || lpad(g::text, 2, '0'))::uuid, 'x' FROM generate_series(10, 19) g`)
	require.NoError(t, err)

	dry := func(args ...string) string {
		t.Helper()
		r := cmd(append([]string{"replay", "--dry-run"}, args...)...)
		require.Equal(t, 0, r.code, r.stderr)
		return strings.TrimSpace(r.stdout)
	}
	// Integer keys compare as numbers: 3..12 is ten keys (as text, "3" > "12").
	require.Equal(t, "would send 10 keys of source orders", dry("--source", "orders", "--from-key", "3", "--to-key", "12"))
	require.Equal(t, "would send 20 keys of source orders", dry("--source", "orders"))
	require.Equal(t, "would send 18 keys of source orders", dry("--source", "orders", "--from-key", "3"))
	// Text keys in byte order whatever the collation: B < C < a < b < c.
	require.Equal(t, "would send 3 keys of source notes", dry("--source", "notes", "--from-key", "C", "--to-key", "b"))
	require.Equal(t, "would send 2 keys of source notes", dry("--source", "notes", "--to-key", "C"))
	// uuid keys, in any case and with braces.
	require.Equal(t, "would send 3 keys of source customers", dry("--source", "customers",
		"--from-key", "{00000000-0000-0000-0000-000000000012}", "--to-key", "00000000-0000-0000-0000-000000000014"))
	// A time range on the source's changed_at column.
	since := time.Now().Add(-5*time.Hour - 30*time.Minute).UTC().Format(time.RFC3339)
	until := time.Now().Add(-1*time.Hour - 30*time.Minute).UTC().Format(time.RFC3339)
	require.Equal(t, "would send 4 keys of source orders", dry("--source", "orders", "--since", since, "--until", until))
	require.Equal(t, "would send 2 keys of source orders", dry("--source", "orders", "--since", since, "--until", until, "--from-key", "4"))

	refusals := []struct {
		args []string
		want string
	}{
		{[]string{"--source", "orders", "--from-id", "1"}, "--from-id and --to-id name rows of resources: with --source use --from-key and --to-key"},
		{[]string{"--source", "orders", "--failed"}, "--failed does not apply to --source: use syncer retry-failed --source orders"},
		{[]string{"--from-key", "1"}, "--from-key and --to-key name keys of a configured source: give --source NAME"},
		{[]string{"--source", "orders", "--list"}, "--source creates a replay: --list and --cancel ID come alone"},
		{[]string{"--source", "orders", "--from-key", "abc"}, `--from-key/--to-key of source orders (its key is integer): "abc" is not an integer`},
		{[]string{"--source", "orders", "--from-key", "12", "--to-key", "3"}, "from 12 is after to 3"},
		{[]string{"--source", "customers", "--to-key", "nope"}, `"nope" is not a uuid`},
		{[]string{"--source", "customers", "--since", since}, "--since and --until with --source select rows by the time of their last change: name that column as changed_at of source customers"},
		{[]string{"--source", "nope"}, "--source: no source nope is installed (installed: customers, notes, orders)"},
	}
	for _, tt := range refusals {
		r := cmd(append([]string{"replay"}, tt.args...)...)
		require.Equal(t, 2, r.code, "%v: %s", tt.args, r.stdout+r.stderr)
		oneLine(t, r, tt.want)
	}

	// A replay with no daemon running, cancelled: nothing of it is queued.
	r = cmd("replay", "--source", "customers")
	require.Equal(t, 0, r.code, r.stderr)
	cancelled := regexp.MustCompile(`^replay (\d+) created: 10 keys of source customers`).FindStringSubmatch(r.stdout)
	require.NotNil(t, cancelled, r.stdout)
	r = cmd("replay", "--cancel", cancelled[1])
	require.Equal(t, 0, r.code, r.stderr)

	// The daemon sends every row once (they were inserted after the
	// install), then the replay's keys once more, at higher versions.
	startDaemon(t, ctx, db...)
	require.Eventually(t, func() bool { return len(fake.Deliveries()) == 35 }, 30*time.Second, 50*time.Millisecond)

	r = cmd("replay", "--source", "orders", "--from-key", "3", "--to-key", "12", "--wait", "--poll", "50ms")
	require.Equal(t, 0, r.code, r.stdout+r.stderr)
	require.Regexp(t, `(?m)^replay \d+ created: 10 keys of source orders; running daemons will send them$`, r.stdout)
	require.Regexp(t, `(?m)^replay \d+ done: 10 keys sent$`, r.stdout)
	require.Eventually(t, func() bool { return len(fake.Deliveries()) == 45 }, 10*time.Second, 50*time.Millisecond)
	versions := map[string][]int64{}
	for _, d := range fake.Deliveries() {
		id := d.Text
		if id == "" {
			id = fmt.Sprint(d.ID)
		}
		versions[id] = append(versions[id], d.Version)
	}
	for i := 1; i <= 20; i++ {
		v := versions[fmt.Sprint(i)]
		if i >= 3 && i <= 12 {
			require.Len(t, v, 2, "order %d: sent again by the replay", i)
			require.Greater(t, v[1], v[0], "order %d: at a higher version", i)
		} else {
			require.Len(t, v, 1, "order %d is outside the range", i)
		}
	}
	for _, u := range []string{"00000000-0000-0000-0000-000000000010", "00000000-0000-0000-0000-000000000019"} {
		require.Len(t, versions[u], 1, "the cancelled replay sent nothing")
	}

	r = cmd("replay", "--list")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `(?m)^`+cancelled[1]+` +cancelled +source customers, all rows +0 of 10 keys sent \(0 queued\)`, r.stdout)
	require.Regexp(t, `(?m)^\d+ +done +source orders, keys 3 to 12 +10 of 10 keys sent \(10 queued\)`, r.stdout)
	r = run(ctx, "status", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `(?m)^replay \d+ +done, 10 of 10 keys of source orders \(100.0%\)`, r.stdout)
}

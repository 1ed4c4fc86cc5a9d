package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/verify"
)

// verifyResult is the JSON of syncer verify --json.
type verifyResult struct {
	Source  string `json:"source"`
	Checked int64  `json:"checked"`
	OK      int64  `json:"ok"`
	Missing int64  `json:"missing"`
	Stale   int64  `json:"stale"`
	Zombie  int64  `json:"zombie"`
	Failed  int64  `json:"failed"`
	Unknown int64  `json:"unknown"`
	Pending int64  `json:"pending"`
	Tenants []struct {
		Tenant  string `json:"tenant"`
		Checked int64  `json:"checked"`
		OK      int64  `json:"ok"`
		Missing int64  `json:"missing"`
		Stale   int64  `json:"stale"`
		Zombie  int64  `json:"zombie"`
		Failed  int64  `json:"failed"`
		Unknown int64  `json:"unknown"`
		Pending int64  `json:"pending"`
	} `json:"tenants"`
	Examples []struct {
		ID    string          `json:"id"`
		Kind  string          `json:"kind"`
		Here  json.RawMessage `json:"here"`
		There json.RawMessage `json:"there"`
	} `json:"examples"`
}

func verifyJSON(t *testing.T, r result) verifyResult {
	t.Helper()
	var v verifyResult
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &v), r.stdout+r.stderr)
	return v
}

// TestVerifyAndHeal: resources exported by a running daemon to the fake
// third party, then lost, edited, re-created and hidden there, are
// reported exactly by kind, healed through the export path (the daemon
// sends them, verify sends nothing), and verified clean; rows not yet
// exported are pending, never drift.
func TestVerifyAndHeal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, true)
	fake := fakethirdparty.New(fakethirdparty.Config{Lookup: true})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	db := []string{"--database-url", b.dsn, "--log-level", "error", "--thirdparty-url", srv.URL}
	verifyCmd := func(args ...string) result {
		return run(ctx, append(append([]string{"verify", "--source", "resources", "--lookup-size", "7"}, args...), db...)...)
	}

	// Nothing exported yet: every row is pending, nothing drifted, and no
	// lookup was needed.
	b.fill(t, 30)
	r := verifyCmd("--json")
	require.Equal(t, 0, r.code, r.stdout+r.stderr)
	v := verifyJSON(t, r)
	require.Equal(t, verifyResult{Source: "resources", Checked: 30, Pending: 30}, verifyResult{Source: v.Source, Checked: v.Checked, Pending: v.Pending, OK: v.OK})
	require.Empty(t, fake.Lookups())

	startDaemon(t, ctx, db...)
	// Rows 28..30 deleted: their tombstones go too.
	_, err := b.pool.Exec(ctx, `DELETE FROM resources WHERE id >= 28`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM resources WHERE synced_at IS NULL)
			+ (SELECT count(*) FROM syncer_tombstones WHERE synced_at IS NULL)`).Scan(&n))
		return n == 0
	}, 30*time.Second, 50*time.Millisecond)

	r = verifyCmd()
	require.Equal(t, 0, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stdout, "source resources: 30 keys checked: 30 ok, 0 missing, 0 stale, 0 zombie, 0 failed, 0 unknown, 0 pending\nnothing drifted\n")

	// The third party drifts: 1 and 2 lost, 3 edited (5 edited to the
	// same value in another spelling: no drift), 29 re-created, 10 not
	// answered.
	fake.ApplyDrift(fakethirdparty.Drift{
		Lose:     []string{"1", "2"},
		Edit:     map[string]json.RawMessage{"3": json.RawMessage(`{"n": 333}`), "5": json.RawMessage(`{ "n" : 5.0 }`)},
		Recreate: map[string]json.RawMessage{"29": json.RawMessage(`{"n": 29}`)},
		Unknown:  []string{"10"},
	})
	before := fake.Stats().ItemsReceived
	r = verifyCmd("--json")
	require.Equal(t, 3, r.code, r.stdout+r.stderr)
	v = verifyJSON(t, r)
	require.Equal(t, [7]int64{30, 25, 2, 1, 1, 1, 0}, [7]int64{v.Checked, v.OK, v.Missing, v.Stale, v.Zombie, v.Unknown, v.Pending})
	kinds := map[string]string{}
	for _, ex := range v.Examples {
		kinds[ex.ID] = ex.Kind
	}
	require.Equal(t, map[string]string{"1": "missing", "2": "missing", "3": "stale", "29": "zombie", "10": "unknown"}, kinds)
	for _, ex := range v.Examples {
		if ex.ID == "3" {
			require.JSONEq(t, `{"n": 3}`, string(ex.Here))
			require.JSONEq(t, `{"n": 333}`, string(ex.There))
		}
	}
	require.Equal(t, before, fake.Stats().ItemsReceived, "verify without --heal changes nothing")

	// --heal: the same report, and the daemon sends the four drifted keys
	// again, at new versions (a tombstone for 29).
	r = verifyCmd("--heal")
	require.Equal(t, 3, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stdout, "4 drifted keys are pending again: the running daemons send them\n")
	require.Eventually(t, func() bool { return fake.Stats().ItemsReceived >= before+4 }, 30*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool {
		r = verifyCmd("--json")
		return r.code == 0
	}, 30*time.Second, 100*time.Millisecond, r.stdout+r.stderr)
	v = verifyJSON(t, r)
	require.Equal(t, [7]int64{30, 29, 0, 0, 0, 1, 0}, [7]int64{v.Checked, v.OK, v.Missing, v.Stale, v.Zombie, v.Unknown, v.Pending})
	var tombstone29 bool
	for _, d := range fake.Deliveries() {
		tombstone29 = tombstone29 || (d.ID == 29 && d.Deleted && d.Version > 2)
	}
	require.True(t, tombstone29, "29 deleted again by a tombstone at a new version")
}

// TestVerifyResumes: a verify interrupted after its first lookup resumes
// where it stopped, with the counts it had, and asks for no page twice.
func TestVerifyResumes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupSynced(t, 20)
	fake := fakethirdparty.New(fakethirdparty.Config{Lookup: true})
	runCtx, interrupt := context.WithCancel(ctx)
	var lookups atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fake.ServeHTTP(w, r)
		if r.URL.Path == "/v1/lookup" && lookups.Add(1) == 1 {
			interrupt()
		}
	}))
	t.Cleanup(srv.Close)
	args := []string{"verify", "--source", "resources", "--lookup-size", "5", "--database-url", b.dsn, "--thirdparty-url", srv.URL}

	r := run(runCtx, args...)
	require.Equal(t, 1, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stderr, "interrupted; run it again to resume")

	r = run(ctx, append(args, "--json")...)
	require.Equal(t, 3, r.code, r.stdout+r.stderr)
	v := verifyJSON(t, r)
	// The fake holds nothing: every key is missing, each counted once.
	require.Equal(t, int64(20), v.Checked)
	require.Equal(t, int64(20), v.Missing)
	require.Equal(t, int64(5), lookups.Load(), "4 pages and the one interrupted before its progress was saved")

	// A finished run leaves no progress: the next one starts afresh.
	r = run(ctx, args...)
	require.Equal(t, 3, r.code, r.stdout+r.stderr)
	require.False(t, strings.Contains(r.stdout, "resumed"), r.stdout)
	require.Contains(t, r.stdout, "20 keys checked")
}

// TestVerifyRefusals: formats without a read API, tenants on a source
// without tenants and bad flags exit 2 with one line saying why.
func TestVerifyRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--thirdparty-format", "standard-webhooks"}, "format standard-webhooks has no read API"},
		{[]string{"--thirdparty-format", "cloudevents"}, "format cloudevents has no read API"},
		{[]string{"--tenant", "acme"}, "--tenant acme: source resources has no tenants"},
		{[]string{"--sample", "0"}, "--sample must be above 0"},
		{[]string{"--from-key", "x"}, "resources ids are integers"},
	} {
		r := run(t.Context(), append([]string{"verify", "--source", "resources", "--database-url", b.dsn, "--thirdparty-url", "http://127.0.0.1:1"}, tt.args...)...)
		require.Equal(t, 2, r.code, "%v: %s", tt.args, r.stdout+r.stderr)
		oneLine(t, r, tt.want)
	}
}

// TestVerifyConfiguredSource: a configured source with a row filter: a
// row filtered out that the third party holds is a zombie, a lost row
// missing, an edited one stale; --heal sends them again through the
// export (a tombstone for the zombie) and the source verifies clean.
func TestVerifyConfiguredSource(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, fake, _, db := ordersBehindAFake(t, `destinations:
  crm:
    url: %s
sources:
  - table: orders
    key: id
    destination: crm
    where: status <> 'hidden'
    columns: [id, status]
`)
	var r result
	_, err := b.pool.Exec(ctx, `INSERT INTO orders SELECT g, CASE WHEN g = 9 THEN 'hidden' ELSE 'new' END FROM generate_series(1, 12) g`)
	require.NoError(t, err)

	startDaemon(t, ctx, db...)
	require.Eventually(t, func() bool { return len(fake.Deliveries()) == 11 }, 30*time.Second, 50*time.Millisecond)
	verifyCmd := func(args ...string) result {
		return run(ctx, append(append([]string{"verify", "--source", "orders", "--lookup-size", "5"}, args...), db...)...)
	}
	require.Eventually(t, func() bool {
		r = verifyCmd()
		return r.code == 0
	}, 10*time.Second, 50*time.Millisecond, "%v", &r)

	fake.ApplyDrift(fakethirdparty.Drift{
		Lose:     []string{"4"},
		Edit:     map[string]json.RawMessage{"5": json.RawMessage(`{"id": 5, "status": "edited in the UI"}`)},
		Recreate: map[string]json.RawMessage{"9": json.RawMessage(`{"id": 9, "status": "hidden"}`)},
	})
	r = verifyCmd("--json", "--heal")
	require.Equal(t, 3, r.code, r.stdout+r.stderr)
	v := verifyJSON(t, r)
	require.Equal(t, [7]int64{12, 9, 1, 1, 1, 0, 0}, [7]int64{v.Checked, v.OK, v.Missing, v.Stale, v.Zombie, v.Unknown, v.Pending})
	require.Eventually(t, func() bool { return verifyCmd().code == 0 }, 30*time.Second, 100*time.Millisecond)
	var tombstone9 bool
	for _, d := range fake.Deliveries() {
		tombstone9 = tombstone9 || (d.ID == 9 && d.Deleted)
	}
	require.True(t, tombstone9, "the row filtered out is deleted there by a tombstone")

	// A range of keys, and a key of the wrong type.
	r = verifyCmd("--from-key", "3", "--to-key", "7")
	require.Equal(t, 0, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stdout, "5 keys checked: 5 ok")
	r = verifyCmd("--from-key", "x")
	require.Equal(t, 2, r.code, r.stdout+r.stderr)
	oneLine(t, r, `"x" is not an integer`)
}

// TestVerifyElasticsearch: resources exported with the elasticsearch
// format to the same receiver the format tests use, read back with _mget
// on the index: _version (the external version) and _source compared,
// drift found and healed, an error entry unknown.
func TestVerifyElasticsearch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, true)
	fake := fakethirdparty.New(fakethirdparty.Config{Format: fakethirdparty.FormatElasticsearch, Lookup: true})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	db := []string{"--database-url", b.dsn, "--log-level", "error", "--thirdparty-url", srv.URL + "/orders", "--thirdparty-format", "elasticsearch"}
	b.fill(t, 12)
	startDaemon(t, ctx, db...)
	_, err := b.pool.Exec(ctx, `DELETE FROM resources WHERE id = 12`)
	require.NoError(t, err)
	verifyCmd := func(args ...string) result {
		return run(ctx, append(append([]string{"verify", "--source", "resources", "--json"}, args...), db...)...)
	}
	var r result
	require.Eventually(t, func() bool {
		r = verifyCmd()
		return r.code == 0 && verifyJSON(t, r).OK == 12
	}, 30*time.Second, 100*time.Millisecond, "%v", &r)

	fake.ApplyDrift(fakethirdparty.Drift{
		Lose:     []string{"1"},
		Edit:     map[string]json.RawMessage{"2": json.RawMessage(`{"n": 22}`)},
		Recreate: map[string]json.RawMessage{"12": json.RawMessage(`{"n": 12}`)},
		Unknown:  []string{"3"},
	})
	r = verifyCmd("--heal")
	require.Equal(t, 3, r.code, r.stdout+r.stderr)
	v := verifyJSON(t, r)
	require.Equal(t, [7]int64{12, 8, 1, 1, 1, 1, 0}, [7]int64{v.Checked, v.OK, v.Missing, v.Stale, v.Zombie, v.Unknown, v.Pending})
	require.Eventually(t, func() bool {
		r = verifyCmd()
		return r.code == 0 && verifyJSON(t, r).OK == 11
	}, 30*time.Second, 100*time.Millisecond, "%v", &r)
}

// TestVerifyWaitsForTheDaemonsRun: while a daemon verifies a source (it
// holds the source's verify lock), syncer verify of it exits 1 saying so:
// two runs would share the source's saved progress.
func TestVerifyWaitsForTheDaemonsRun(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t, true)
	schema, err := database.CurrentSchema(ctx, b.pool)
	require.NoError(t, err)
	conn, err := b.pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, verify.VerifyKey(schema, "resources"))
	require.NoError(t, err)
	r := run(ctx, "verify", "--source", "resources", "--database-url", b.dsn, "--thirdparty-url", "http://127.0.0.1:1")
	require.Equal(t, 1, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stderr, "a daemon is verifying this source now")
	_, err = conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, verify.VerifyKey(schema, "resources"))
	require.NoError(t, err)
}

// TestStatusShowsTheLastVerify: status prints each source's last verify,
// its time and counts by kind, as text and in --json.
func TestStatusShowsTheLastVerify(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setupSynced(t, 4)
	srv := httptest.NewServer(fakethirdparty.New(fakethirdparty.Config{Lookup: true}))
	t.Cleanup(srv.Close)
	r := run(ctx, "verify", "--source", "resources", "--database-url", b.dsn, "--thirdparty-url", srv.URL)
	require.Equal(t, 3, r.code, r.stdout+r.stderr)

	r = run(ctx, "status", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stdout+r.stderr)
	require.Regexp(t, `verify resources\s+last finished \S+: 4 checked, 0 ok, 4 missing, 0 stale, 0 zombie, 0 failed, 0 unknown, 0 pending: DRIFT \(command\)`, r.stdout)

	r = run(ctx, "status", "--json", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stdout+r.stderr)
	var st struct {
		Sources []struct {
			Name   string `json:"name"`
			Verify struct {
				State  string           `json:"state"`
				By     string           `json:"by"`
				Counts map[string]int64 `json:"counts"`
			} `json:"verify"`
		} `json:"sources"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.Len(t, st.Sources, 1)
	require.Equal(t, "finished", st.Sources[0].Verify.State)
	require.Equal(t, "command", st.Sources[0].Verify.By)
	require.Equal(t, int64(4), st.Sources[0].Verify.Counts["missing"])
}

// TestVerifyConfiguredSourceOfTheDefaultDestination: a configured source
// sending to the default destination is read back from the flags'
// destination (SYNCER_THIRDPARTY_*), as the daemons read it; verify
// refused it before its rows went through the seam ("its destination
// default is not in --config").
func TestVerifyConfiguredSourceOfTheDefaultDestination(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// crm is the fake too, and unused: a file names one destination at
	// least.
	b, fake, url, db := ordersBehindAFake(t, `destinations:
  crm:
    url: %s
sources:
  - {table: orders, key: id, destination: default, columns: [id, status]}
`)
	_, err := b.pool.Exec(ctx, `INSERT INTO orders SELECT g, 'new' FROM generate_series(1, 5) g`)
	require.NoError(t, err)
	startDaemon(t, ctx, append([]string{"--thirdparty-url", url}, db...)...)
	require.Eventually(t, func() bool { return len(fake.Deliveries()) == 5 }, 30*time.Second, 50*time.Millisecond)
	var r result
	require.Eventually(t, func() bool {
		r = run(ctx, append([]string{"verify", "--source", "orders", "--thirdparty-url", url}, db...)...)
		return r.code == 0
	}, 10*time.Second, 50*time.Millisecond, "%v", &r)
	require.Contains(t, r.stdout, "source orders: 5 keys checked: 5 ok")
}

// ordersBehindAFake is a migrated schema with a table orders, exported
// as the configuration file config says (its %s is the URL of a fake
// third party that reads back); it returns the fake, its URL and the
// flags of a command on them.
func ordersBehindAFake(t *testing.T, config string) (*bundle, *fakethirdparty.Server, string, []string) {
	t.Helper()
	b := setup(t, false)
	_, err := b.pool.Exec(t.Context(), `CREATE TABLE orders (id integer PRIMARY KEY, status text NOT NULL)`)
	require.NoError(t, err)
	fake := fakethirdparty.New(fakethirdparty.Config{Lookup: true})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	cfg := filepath.Join(t.TempDir(), "syncer.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(config, srv.URL)), 0o600))
	db := []string{"--database-url", b.dsn, "--log-level", "error", "--config", cfg}
	r := run(t.Context(), append([]string{"migrate"}, db...)...)
	require.Equal(t, 0, r.code, r.stderr)
	return b, fake, srv.URL, db
}

package verify_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/formats/syncer"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/verify"
)

func TestSameJSON(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		a, b string
		same bool
	}{
		{`{"a":1,"b":[1,2]}`, `{ "b": [1, 2], "a": 1.0 }`, true},
		{`{"a":1}`, `{"a":"1"}`, false},
		{`{"a":[1,2]}`, `{"a":[2,1]}`, false},
		{`{"a":null}`, `{}`, false},
	} {
		require.Equal(t, tt.same, verify.SameJSON(json.RawMessage(tt.a), json.RawMessage(tt.b)), "%s %s", tt.a, tt.b)
	}
}

// TestPaceQuarterWhilePending: while the source has rows pending, lookups
// go at a quarter of the destination's rate (and a quarter of its burst),
// and at the whole rate once nothing is pending; rows pending are never
// asked for.
func TestPaceQuarterWhilePending(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := setupLookups(t, verify.Range{}, `INSERT INTO resources (payload) SELECT jsonb_build_object('n', g) FROM generate_series(1, 10) g;
		UPDATE resources SET synced_at = now() WHERE id <= 5`)

	pace := verify.NewPace(40, 8)
	res, err := verify.Run(ctx, l.db.Pool, l.src, syncerReader(t, l.url), &verify.Config{LookupSize: 2, Pace: pace})
	require.NoError(t, err)
	require.Equal(t, 10.0, pace.Limit(), "a quarter of 40 while rows 6..10 are pending")
	require.Equal(t, int64(5), res.Pending)
	require.Equal(t, int64(5), res.Missing)
	require.Len(t, l.fake.Lookups(), 3, "pages 1-2, 3-4 and 5: pending rows are not asked for")

	_, err = l.db.Pool.Exec(ctx, `UPDATE resources SET synced_at = now()`)
	require.NoError(t, err)
	res, err = verify.Run(ctx, l.db.Pool, l.src, syncerReader(t, l.url), &verify.Config{LookupSize: 2, Pace: pace})
	require.NoError(t, err)
	require.Equal(t, 40.0, pace.Limit(), "the whole rate once nothing is pending")
	require.Equal(t, int64(10), res.Missing)
}

// TestSample: --sample checks about that share of the keys, and counts
// only those.
func TestSample(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := setupLookups(t, verify.Range{FromKey: "1", ToKey: "1000"},
		`INSERT INTO resources (payload, synced_at) SELECT jsonb_build_object('n', g), now() FROM generate_series(1, 1000) g`)
	res, err := verify.Run(ctx, l.db.Pool, l.src, syncerReader(t, l.url), &verify.Config{Sample: 0.1})
	require.NoError(t, err)
	require.InDelta(t, 100, res.Checked, 50)
	require.Equal(t, res.Checked, res.Missing)
	require.LessOrEqual(t, len(res.Examples), verify.ExamplesDefault)
}

// racingReader writes to a row while its lookup is under way, as an
// application would.
type racingReader struct {
	verify.Reader
	write func()
}

func (r racingReader) Lookup(ctx context.Context, ids []string) (map[string]verify.There, error) {
	r.write()
	return r.Reader.Lookup(ctx, ids)
}

// TestWriteDuringLookupIsPending: a key whose row changes between the
// page's read and the answer is pending, not drifted, and not healed.
func TestWriteDuringLookupIsPending(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := setupLookups(t, verify.Range{},
		`INSERT INTO resources (payload, synced_at) SELECT jsonb_build_object('n', g), now() FROM generate_series(1, 4) g`)
	rd := racingReader{Reader: syncerReader(t, l.url), write: func() {
		_, err := l.db.Pool.Exec(ctx, `UPDATE resources SET payload = '{"n": 20}' WHERE id = 2`)
		require.NoError(t, err)
	}}
	res, err := verify.Run(ctx, l.db.Pool, l.src, rd, &verify.Config{Heal: true})
	require.NoError(t, err)
	require.Equal(t, [3]int64{4, 3, 1}, [3]int64{res.Checked, res.Missing, res.Pending})
	require.Equal(t, int64(3), res.Healed)
	var version int64
	require.NoError(t, l.db.Pool.QueryRow(ctx, `SELECT version FROM resources WHERE id = 2`).Scan(&version))
	require.Equal(t, int64(2), version, "the written row is at its write's version, not healed again")
}

// TestPaceObeysTheDaemonsFacts: a person's pause of the destination, as
// the daemons share it, stops a run (resumable) before any lookup.
func TestPaceObeysTheDaemonsFacts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := setupLookups(t, verify.Range{}, `INSERT INTO resources (payload, synced_at) VALUES ('{}', now())`)
	store, err := breakerstore.New(l.db.Pool, &breakerstore.Config{})
	require.NoError(t, err)
	_, err = store.SetHold(ctx, breakerstore.Hold{Paused: true, By: "command line"})
	require.NoError(t, err)
	_, err = verify.Run(ctx, l.db.Pool, l.src, syncerReader(t, l.url),
		&verify.Config{Pace: verify.NewPace(0, 1).Shared(breakerstore.DefaultNamespace)})
	require.ErrorIs(t, err, verify.ErrDestinationStopped)
	require.Empty(t, l.fake.Lookups())
}

// lookups is what a run of verify over the resources source needs: a
// migrated schema, the source and a fake third party that answers
// lookups at url.
type lookups struct {
	db   *dbtest.TestSchema
	src  *verify.Resources
	fake *fakethirdparty.Server
	url  string
}

// setupLookups returns the lookups whose schema holds the rows the SQL
// rows wrote and whose source reads the range rng of them.
func setupLookups(t *testing.T, rng verify.Range, rows string) *lookups {
	t.Helper()
	db := dbtest.NewMigrated(t)
	_, err := db.Pool.Exec(context.Background(), rows)
	require.NoError(t, err)
	src, err := verify.NewResources(rng)
	require.NoError(t, err)
	fake := fakethirdparty.New(fakethirdparty.Config{Lookup: true})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	return &lookups{db: db, src: src, fake: fake, url: srv.URL}
}

// syncerReader reads the syncer format at url, with no token.
func syncerReader(t *testing.T, url string) verify.Reader {
	t.Helper()
	c, err := verify.NewClient(url, "")
	require.NoError(t, err)
	return syncer.NewReader(c)
}

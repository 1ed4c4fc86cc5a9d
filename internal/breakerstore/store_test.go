package breakerstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sony/gobreaker/v2"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/migrations"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

type testBundle struct {
	dsn  string
	pool *pgxpool.Pool
	// store is one daemon's Store; newStore gives another daemon's.
	store *breakerstore.Store
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	dsn, _ := dbtest.NewSchema(t)
	b := &testBundle{dsn: dsn}
	b.pool, b.store = b.newStore(t)
	_, err := migrations.Up(context.Background(), b.pool, nil)
	require.NoError(t, err)
	return b
}

// newStore opens another pool on the same schema, as another daemon would.
func (b *testBundle) newStore(t *testing.T) (*pgxpool.Pool, *breakerstore.Store) {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), b.dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := breakerstore.New(pool, nil)
	require.NoError(t, err)
	return pool, s
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := breakerstore.New(nil, nil)
	require.ErrorContains(t, err, "pool")
	_, err = breakerstore.New(b.pool, &breakerstore.Config{Timeout: -time.Second})
	require.ErrorContains(t, err, "Timeout")
}

func TestReadStateRoundTrip(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()

	st, err := breakerstore.ReadState(ctx, b.pool)
	require.NoError(t, err)
	require.Equal(t, breakerstore.State{}, st, "nothing recorded reads as zero facts")

	now := time.Now().UTC().Truncate(time.Millisecond)
	want := breakerstore.State{
		Breaker:       breakerstore.Breaker{State: gobreaker.StateOpen, Generation: 3, Expiry: now.Add(time.Minute)},
		Configuration: breakerstore.Refusal{Refused: true, Status: 404, Message: "third party answered 404", Since: now},
		Pause:         breakerstore.Pause{Until: now.Add(time.Minute), Cause: "429 Retry-After: 60", Status: 429},
		Rate:          breakerstore.Rate{Limit: 17.5, Ceiling: 20, UpdatedAt: now},
		LastError:     breakerstore.LastError{Text: "thirdparty: push refused with status 503", Status: 503, At: now},
	}
	require.NoError(t, b.store.SetBreaker(ctx, want.Breaker))
	require.NoError(t, b.store.SetPause(ctx, want.Pause))
	require.NoError(t, b.store.SetRate(ctx, want.Rate))
	require.NoError(t, b.store.SetLastError(ctx, want.LastError))
	changed, err := b.store.SetRefusal(ctx, breakerstore.KeyConfiguration, breakerstore.Refusal{Refused: true, Status: 404, Message: "third party answered 404"})
	require.NoError(t, err)
	require.True(t, changed)

	_, other := b.newStore(t)
	got, err := other.Load(ctx)
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), got.Configuration.Since, time.Minute)
	got.Configuration.Since = now
	require.Equal(t, want.Breaker.State, got.Breaker.State)
	require.True(t, want.Breaker.Expiry.Equal(got.Breaker.Expiry))
	require.Equal(t, want.Configuration, got.Configuration)
	require.Equal(t, want.Pause.Cause, got.Pause.Cause)
	require.True(t, want.Pause.Until.Equal(got.Pause.Until))
	require.Equal(t, want.Rate.Limit, got.Rate.Limit)
	require.Equal(t, want.LastError.Text, got.LastError.Text)
	require.False(t, got.Credentials.Refused)
}

// A row that does not decode reads as never recorded: status must work
// after a bad write, and gobreaker's own rows (bare numbers) still read.
func TestReadStateHostileRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	_, err := b.pool.Exec(ctx, `INSERT INTO syncer_state (key, value) VALUES
		($1, '{"state":2,"generation":7,"counts":{"Requests":5},"expiry":"2999-01-01T00:00:00Z"}'),
		($2, '<html>not json</html>'), ($3, '{"limit":"fast"}')`,
		breakerstore.KeyBreaker, breakerstore.KeyPause, breakerstore.KeyRate)
	require.NoError(t, err)
	st, err := breakerstore.ReadState(ctx, b.pool)
	require.NoError(t, err)
	require.Equal(t, gobreaker.StateOpen, st.Breaker.State, "gobreaker's SharedState layout reads")
	require.Equal(t, uint64(7), st.Breaker.Generation)
	require.Equal(t, breakerstore.Pause{}, st.Pause)
	require.Equal(t, breakerstore.Rate{}, st.Rate)
}

func TestBreakerCurrent(t *testing.T) {
	t.Parallel()
	now := time.Now()
	tests := []struct {
		name string
		b    breakerstore.Breaker
		want gobreaker.State
		open bool
	}{
		{"never written", breakerstore.Breaker{}, gobreaker.StateClosed, false},
		{"open", breakerstore.Breaker{State: gobreaker.StateOpen, Expiry: now.Add(time.Second)}, gobreaker.StateOpen, true},
		{"open, expired", breakerstore.Breaker{State: gobreaker.StateOpen, Expiry: now.Add(-time.Second)}, gobreaker.StateHalfOpen, false},
		{"half-open", breakerstore.Breaker{State: gobreaker.StateHalfOpen}, gobreaker.StateHalfOpen, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.b.Current(now))
			require.Equal(t, tt.open, !tt.b.OpenUntil(now).IsZero())
		})
	}
}

func TestSetRefusalReportsChanges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()

	changed, err := b.store.SetCredentials(ctx, false, "")
	require.NoError(t, err)
	require.False(t, changed, "nothing recorded and nothing refused: no change")

	changed, err = b.store.SetRefusal(ctx, breakerstore.KeyCredentials, breakerstore.Refusal{Refused: true, Status: 401, Message: "third party answered 401"})
	require.NoError(t, err)
	require.True(t, changed)
	st, err := b.store.Load(ctx)
	require.NoError(t, err)
	require.Equal(t, 401, st.Credentials.Status)
	require.Equal(t, "third party answered 401", st.Credentials.Message)
	since := st.Credentials.Since
	require.False(t, since.IsZero())

	// Another daemon sees the same refusal: no transition, Since kept, the
	// latest words recorded.
	_, other := b.newStore(t)
	changed, err = other.SetRefusal(ctx, breakerstore.KeyCredentials, breakerstore.Refusal{Refused: true, Status: 403, Message: "third party answered 403"})
	require.NoError(t, err)
	require.False(t, changed, "a second refusal is not a transition")
	st, err = b.store.Load(ctx)
	require.NoError(t, err)
	require.Equal(t, 403, st.Credentials.Status)
	require.True(t, since.Equal(st.Credentials.Since))

	changed, err = b.store.SetCredentials(ctx, false, "")
	require.NoError(t, err)
	require.True(t, changed)
	st, err = b.store.Load(ctx)
	require.NoError(t, err)
	require.False(t, st.Credentials.Refused)
	require.False(t, st.Configuration.Refused, "the two refusals are separate facts")

	_, err = b.store.SetRefusal(ctx, "other", breakerstore.Refusal{Refused: true})
	require.ErrorContains(t, err, "unknown key")
}

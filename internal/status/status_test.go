package status_test

import (
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/status"
)

func TestGatherReadsThePushPathFacts(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.NewMigrated(t).Pool

	r, err := status.Gather(ctx, pool, nil)
	require.NoError(t, err)
	require.Equal(t, "closed", r.Breaker.State)
	require.Nil(t, r.Pause)
	require.Nil(t, r.LastError)

	store, err := breakerstore.New(pool, nil)
	require.NoError(t, err)
	now := time.Now()
	require.NoError(t, store.SetBreaker(ctx, breakerstore.Breaker{State: gobreaker.StateOpen, Expiry: now.Add(time.Minute)}))
	require.NoError(t, store.SetPause(ctx, breakerstore.Pause{Until: now.Add(time.Minute), Cause: "429 Retry-After: 60", Status: 429}))
	require.NoError(t, store.SetRate(ctx, breakerstore.Rate{Limit: 18, Ceiling: 20}))
	require.NoError(t, store.SetLastError(ctx, breakerstore.LastError{Text: "503 Service Unavailable", Status: 503}))
	_, err = store.SetRefusal(ctx, breakerstore.KeyConfiguration, breakerstore.Refusal{Refused: true, Status: 404, Message: "404 Not Found"})
	require.NoError(t, err)

	r, err = status.Gather(ctx, pool, nil)
	require.NoError(t, err)
	require.Equal(t, "open", r.Breaker.State)
	require.NotNil(t, r.Pause)
	require.Equal(t, "429 Retry-After: 60", r.Pause.Cause)
	require.NotNil(t, r.Rate)
	require.InDelta(t, 18, r.Rate.Limit, 0.001)
	require.NotNil(t, r.LastError)
	require.Equal(t, 503, r.LastError.Status)
	require.True(t, r.Configuration.Refused)
	require.Equal(t, "404 Not Found", r.Configuration.Message)
}

// A destination held by syncer itself (a request program failing on every
// row) is not said to refuse its URL: no answer did.
func TestStoppedByAProgram(t *testing.T) {
	t.Parallel()
	d := &status.Destination{Name: "crm", Configuration: breakerstore.Refusal{Refused: true,
		Message: "delivery: the request program fails on every row: request.body: ran past its bound of 1s (program_timeout)"}}
	require.Equal(t, "destination crm held for its configuration, no row failed: delivery: the request program fails on every row: request.body: ran past its bound of 1s (program_timeout)", d.Stopped())
	d.Configuration.Status = 404
	require.Contains(t, d.Stopped(), "refuses the URL")
}

package tenants_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/tenants"
)

// Issue 54 point 16 (contract 10.1): the query may give each tenant its
// own rate_limit, rate_burst and max_in_flight. config check accepts the
// columns; the tenant's deliverer is built with them; NULL is the
// destination's; a change in the row is applied at its next read; a
// value that is no positive number is the tenant's state, never quoted.
func TestTenantOwnLimitsFromItsRow(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	b.exec(t, `ALTER TABLE connections ADD COLUMN rl numeric, ADD COLUMN burst int, ADD COLUMN inflight text`)
	b.exec(t, `INSERT INTO connections (account, url, rl, burst, inflight) VALUES
		('acme', $1, 3, 2, '1'), ('globex', $2, NULL, NULL, NULL), ('initech', $3, -2.5, NULL, NULL), ('hooli', $4, 2, 3, '1.5')`,
		b.url+"/t/acme", b.url+"/t/globex", b.url+"/t/initech", b.url+"/t/hooli")
	query := `SELECT url, rl AS rate_limit, burst AS rate_burst, inflight AS max_in_flight FROM connections WHERE account = $1`
	require.NoError(t, tenants.Check(t.Context(), b.pool, &tenants.Settings{Query: query}, tenants.CheckSpec{}),
		"config check takes the limits' columns")
	require.NoError(t, tenants.Check(t.Context(), b.pool, &tenants.Settings{Query: `SELECT 3 AS rate_limit, 2 AS rate_burst, 1 AS max_in_flight WHERE $1::text IS NOT NULL`},
		tenants.CheckSpec{HasURL: true}), "3 AS rate_limit")

	r := b.registry(t, tenants.Config{Settings: &tenants.Settings{Query: query},
		Delivery: delivery.Config{RateLimit: 10, MaxInFlight: 4}})
	acme, err := r.For(t.Context(), "acme")
	require.NoError(t, err)
	require.Equal(t, 3.0, acme.Rate(), "acme's own rate_limit")
	require.Equal(t, 1, acme.MaxInFlight(), "acme's own max_in_flight, from text")
	require.NoError(t, acme.Turn(t.Context()))
	wait, _ := acme.Ready(time.Now())
	require.Zero(t, wait, "acme's own burst of 2: a second request may go at once")
	require.NoError(t, acme.Turn(t.Context()))
	wait, _ = acme.Ready(time.Now())
	require.Greater(t, wait, 200*time.Millisecond, "its third waits for a token at 3/s")

	globex, err := r.For(t.Context(), "globex")
	require.NoError(t, err)
	require.Equal(t, 10.0, globex.Rate(), "NULL: the destination's")
	require.Equal(t, 4, globex.MaxInFlight())

	_, err = r.For(t.Context(), "initech")
	require.ErrorContains(t, err, "column rate_limit must be a positive number")
	require.NotContains(t, err.Error(), "2.5")
	_, err = r.For(t.Context(), "hooli")
	require.ErrorContains(t, err, "column max_in_flight must be a whole number")

	// A change in the row takes effect at its next read.
	b.exec(t, `UPDATE connections SET rl = 6, inflight = NULL WHERE account = 'acme'`)
	b.clock.Advance(tenants.RefreshEveryDefault)
	// Read again behind its batches: a later For gives what it read.
	require.Eventually(t, func() bool {
		acme, err = r.For(t.Context(), "acme")
		return err == nil && acme.Rate() == 6.0
	}, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, 4, acme.MaxInFlight(), "NULL again: the destination's")
}

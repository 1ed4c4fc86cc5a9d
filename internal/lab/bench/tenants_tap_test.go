package bench

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The steady window of a limits row runs from the last tenant's start
// (its first 429 when learned) to the first tenant's last request, and
// counts the accepted requests within it.
func TestSteadyWindow(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	reqs := []tappedRequest{
		{tenant: "a", at: at(0), status: http.StatusOK},
		{tenant: "a", at: at(100), status: http.StatusTooManyRequests},
		{tenant: "b", at: at(500), status: http.StatusOK},
		{tenant: "a", at: at(1000), status: http.StatusOK},
		{tenant: "b", at: at(1500), status: http.StatusTooManyRequests},
		{tenant: "a", at: at(2000), status: http.StatusOK},
		{tenant: "b", at: at(2500), status: http.StatusOK},
		{tenant: "a", at: at(3000), status: http.StatusOK}, // a's last
		{tenant: "b", at: at(4000), status: http.StatusOK},
	}
	w, ok := steadyWindow(reqs, false)
	require.True(t, ok)
	require.Equal(t, tenantWindow{from: 500 * time.Millisecond, to: 3 * time.Second, ok: 5}, w)
	require.InDelta(t, 2.0, w.rate(), 1e-9)

	w, ok = steadyWindow(reqs, true)
	require.True(t, ok)
	require.Equal(t, tenantWindow{from: 1500 * time.Millisecond, to: 3 * time.Second, ok: 3}, w)

	// Without a 429, a tenant's limit counts as learned at its sixth
	// request.
	var paced []tappedRequest
	for i := range 8 {
		paced = append(paced, tappedRequest{tenant: "c", at: at(200 * i), status: http.StatusOK})
	}
	w, ok = steadyWindow(append(paced, tappedRequest{tenant: "d", at: at(0), status: http.StatusOK}, tappedRequest{tenant: "d", at: at(1600), status: http.StatusOK}), true)
	require.True(t, ok)
	require.Equal(t, tenantWindow{from: time.Second, to: 1400 * time.Millisecond, ok: 3}, w)

	// b starts after a ended: no window where both send.
	_, ok = steadyWindow([]tappedRequest{{tenant: "a", at: at(0), status: 200}, {tenant: "b", at: at(10), status: 200}}, false)
	require.False(t, ok)
}

func TestLateShare(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	reqs := []tappedRequest{
		{at: t0, status: http.StatusTooManyRequests},
		{at: t0.Add(15 * time.Second), status: http.StatusOK},
		{at: t0.Add(16 * time.Second), status: http.StatusTooManyRequests},
		{at: t0.Add(17 * time.Second), status: http.StatusOK},
		{at: t0.Add(18 * time.Second), status: http.StatusOK},
	}
	require.InDelta(t, 0.25, lateShare(reqs, 15*time.Second), 1e-9)
	require.Equal(t, -1.0, lateShare(reqs, time.Minute))
}

// The join row's figure: the first second from which the second daemon
// sends 30% three seconds in a row; a tail of one daemon's does not count.
func TestJoinShares(t *testing.T) {
	at := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	var reqs []tappedRequest
	add := func(second, first, other int) {
		for i := range first {
			reqs = append(reqs, tappedRequest{at: at.Add(time.Duration(second)*time.Second + time.Duration(i)*time.Millisecond), door: 0})
		}
		for i := range other {
			reqs = append(reqs, tappedRequest{at: at.Add(time.Duration(second)*time.Second + time.Duration(i)*time.Millisecond), door: 1})
		}
	}
	reqs = append(reqs, tappedRequest{at: at.Add(-time.Second), door: 0}) // before the join
	add(0, 100, 0)
	add(1, 80, 20)
	add(2, 60, 40) // 40%, but the next is not
	add(3, 80, 20)
	add(4, 50, 50)
	add(5, 55, 45)
	add(6, 50, 50)
	add(7, 10, 0) // the tail
	j := joinShares(reqs, at)
	require.Equal(t, 4*time.Second, j.took)
	require.InDelta(t, 145.0/310, j.after, 1e-9)

	require.Equal(t, time.Duration(-1), joinShares(reqs[:101], at).took, "never")
}

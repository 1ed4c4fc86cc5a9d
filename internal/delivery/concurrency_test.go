package delivery_test

import (
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/metrics"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// deliverAll delivers batches of size items from goroutines pushers at once
// and returns every item reported accepted.
func deliverAll(t *testing.T, d *delivery.Deliverer, pushers, batches, size int) []thirdparty.Item {
	t.Helper()
	var mu sync.Mutex
	var accepted []thirdparty.Item
	var wg sync.WaitGroup
	next := make(chan int)
	for range pushers {
		wg.Go(func() {
			for k := range next {
				out, err := d.Deliver(t.Context(), batch("", items(k*size+1, size, nil)))
				if !assertNoError(t, err) {
					continue
				}
				mu.Lock()
				accepted = append(accepted, out.Accepted...)
				mu.Unlock()
			}
		})
	}
	for k := range batches {
		next <- k
	}
	close(next)
	wg.Wait()
	return accepted
}

// assertNoError is require.NoError for goroutines other than the test's.
func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Errorf("deliver: %v", err)
		return false
	}
	return true
}

func TestRequestsInFlight(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		fake        fakethirdparty.Config
		maxInFlight int // 0: the default
		want        int
	}{
		{"slow answers", fakethirdparty.Config{Latency: 50 * time.Millisecond}, 3, 3},
		{"default", fakethirdparty.Config{Latency: 50 * time.Millisecond}, 0, delivery.MaxInFlightDefault},
		{"one", fakethirdparty.Config{Latency: 20 * time.Millisecond}, 1, 1},
		// Hostile: 100 ms answers, bare 429s beyond 30/s and one request in
		// five failing: retries and halves take slots like first tries.
		{"hostile", fakethirdparty.Config{Latency: 100 * time.Millisecond, UnannouncedLimit: 30, FailureRate: 0.2, MaxBatchItems: 3}, 3, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tt.fake, "")
			m := metrics.New(prometheus.NewRegistry())
			d := b.deliverer(t, nil, &delivery.Config{
				MaxInFlight: tt.maxInFlight, Metrics: m.Destination(metrics.DefaultDestination), BreakerFailures: 1000,
				BackoffInitial: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
			})
			accepted := deliverAll(t, d, 8, 24, 4)
			require.Len(t, accepted, 24*4, "every item delivered")
			requireOnlyAccepted(t, b.fake, accepted)
			st := b.fake.Stats()
			require.LessOrEqual(t, st.MaxInFlight, int64(tt.want))
			if tt.want > 1 {
				require.Greater(t, st.MaxInFlight, int64(1), "requests really run at once")
			}
			require.Zero(t, st.OverlappingIDs)
			require.InDelta(t, float64(tt.want), testutil.ToFloat64(m.MaxInFlightCurrent.WithLabelValues(metrics.DefaultDestination)), 0)
			require.Zero(t, testutil.ToFloat64(m.RequestsInFlight.WithLabelValues(metrics.DefaultDestination)), "every request answered")
			require.Equal(t, float64(st.Requests), testutil.ToFloat64(m.ThirdpartyResponses.WithLabelValues(metrics.DefaultDestination, "2xx"))+
				testutil.ToFloat64(m.ThirdpartyResponses.WithLabelValues(metrics.DefaultDestination, "429"))+
				testutil.ToFloat64(m.ThirdpartyResponses.WithLabelValues(metrics.DefaultDestination, "413"))+
				testutil.ToFloat64(m.ThirdpartyResponses.WithLabelValues(metrics.DefaultDestination, "5xx")), "every answer counted once")
		})
	}
}

// A context-aware slot: a caller that gives up while every slot is taken
// returns at once.
func TestInFlightSlotRespectsContext(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{Latency: 300 * time.Millisecond}, "")
	d := b.deliverer(t, nil, &delivery.Config{MaxInFlight: 1})
	started := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		close(started)
		_, err := d.Deliver(t.Context(), batch("", items(1, 1, nil)))
		assertNoError(t, err)
	}()
	<-started
	require.Eventually(t, func() bool { return b.fake.Stats().Requests == 1 }, 5*time.Second, 5*time.Millisecond)
	ctx, cancel := contextWithCancel(t)
	cancel()
	_, err := d.Deliver(ctx, batch("", items(2, 1, nil)))
	require.ErrorIs(t, err, ctx.Err())
	<-done
	require.EqualValues(t, 1, b.fake.Stats().Requests)
}

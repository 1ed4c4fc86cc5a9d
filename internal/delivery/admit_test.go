package delivery_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/formats"
	"github.com/syncer-dev/syncer/internal/formats/standardwebhooks"
)

// TestBatchesOfManyRequestsEndInOrder: the requests of a batch sent one
// per item take the destination's places before those of a batch that came
// later, so batches end in the order they came instead of all at once.
// Only the last requests of the first batch, in flight when the second
// starts, may arrive after the second's first.
func TestBatchesOfManyRequestsEndInOrder(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var arrived []int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev struct {
			Data struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &ev); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		id, _ := strconv.Atoi(ev.Data.ID)
		mu.Lock()
		arrived = append(arrived, id)
		mu.Unlock()
		time.Sleep(time.Millisecond)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	f, err := formats.New(&formats.Spec{Name: "standard-webhooks", Settings: standardwebhooks.Settings{SigningSecret: formats.Secret{Value: testSecret}}}, installation)
	require.NoError(t, err)
	const inFlight, n = 4, 64
	d := newDeliverer(t, newClient(t, srv.URL, ""), nil, &delivery.Config{Format: f, MaxInFlight: inFlight})

	var wg sync.WaitGroup
	wg.Go(func() {
		out, err := d.Deliver(t.Context(), batch("", items(1, n, nil)))
		if assertNoError(t, err) {
			require.Len(t, out.Accepted, n)
		}
	})
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(arrived) > 0 }, 5*time.Second, time.Millisecond)
	wg.Go(func() {
		out, err := d.Deliver(t.Context(), batch("", items(1001, n, nil)))
		if assertNoError(t, err) {
			require.Len(t, out.Accepted, n)
		}
	})
	wg.Wait()

	require.Len(t, arrived, 2*n)
	firstOfSecond := slices.IndexFunc(arrived, func(id int) bool { return id > 1000 })
	require.GreaterOrEqual(t, firstOfSecond, n-2*inFlight,
		"the second batch started while the first still had requests to send: %v", arrived)
}

package delivery_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/formats/custom"
	"github.com/syncer-dev/syncer/internal/metrics"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// within runs f and fails the test at once if it has not returned after
// d: an unbounded program would otherwise hang the test until its
// deadline.
func within(t *testing.T, d time.Duration, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("still running after %s", d)
	}
}

// inGojq reports whether a goroutine of the process runs a jq program.
func inGojq() bool {
	buf := make([]byte, 1<<20)
	return strings.Contains(string(buf[:runtime.Stack(buf, true)]), "github.com/itchyny/gojq.")
}

// A response program that never ends, or builds what the third party asks
// (n values, n = 1e9), is stopped at its bound: the answer is no answer,
// the request goes again, Deliver gives up after MaxElapsed as for any
// transient failure, and no goroutine is left running the program.
//
// Not parallel: it counts the process's goroutines.
func TestResponseProgramBounded(t *testing.T) {
	tests := []struct{ name, accepted, body string }{
		{"loops", `last(range(1e11)) >= 0`, `{}`},
		{"the third party picks n", `[range(.body.n)] | length > 0`, `{"n": 1000000000}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var requests atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, tt.body)
			}))
			t.Cleanup(srv.Close)
			f, err := custom.New(&custom.Config{Accepted: tt.accepted, ProgramTimeout: 100 * time.Millisecond})
			require.NoError(t, err)
			client := newClient(t, srv.URL, "")
			d := newDeliverer(t, client, nil, &delivery.Config{Format: f,
				BackoffInitial: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond, MaxElapsed: 300 * time.Millisecond})
			before := runtime.NumGoroutine()

			var out *delivery.Outcome
			within(t, 10*time.Second, func() {
				out, err = d.Deliver(t.Context(), delivery.Batch{Items: items(1, 3, nil), Time: time.Unix(1, 0)})
			})
			require.Nil(t, out, "nothing accepted, nothing rejected")
			require.ErrorIs(t, err, delivery.ErrGaveUp)
			require.ErrorContains(t, err, "response.accepted")
			require.ErrorContains(t, err, "bound")
			require.GreaterOrEqual(t, requests.Load(), int64(2), "not an answer: sent again")

			client.Close()
			srv.CloseClientConnections()
			// Polled here: require.Eventually's own goroutines would count.
			deadline := time.Now().Add(5 * time.Second)
			for (runtime.NumGoroutine() > before || inGojq()) && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			require.LessOrEqual(t, runtime.NumGoroutine(), before, "the goroutine count comes back")
			require.False(t, inGojq(), "no goroutine still runs the program")
		})
	}
}

// A deletes program past its bound on a tombstone, once it has rendered
// another, fails that row alone, with the bound as its reason, and the
// upserts beside it go.
func TestDeletesProgramPastItsBound(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []string
	url := hostileURL(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.URL.Path+" "+string(body))
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	f, err := custom.New(&custom.Config{
		Request:        custom.Request{Path: "/upsert", Body: `{ids: [.items[] | .id]}`},
		Deletes:        &custom.Request{Path: "/archive", Body: `{ids: [.items[] | .id], n: (if any(.items[]; .id == "9") then last(range(1e11)) else 0 end)}`},
		ProgramTimeout: 100 * time.Millisecond,
	})
	require.NoError(t, err)
	d := newDeliverer(t, newClient(t, url, ""), nil, &delivery.Config{Format: f})
	out, err := d.Deliver(t.Context(), delivery.Batch{Items: []thirdparty.Item{{ID: "8", Version: 2, Deleted: true}}, Time: time.Unix(1, 0)})
	require.NoError(t, err)
	require.Len(t, out.Accepted, 1, "the deletes program renders a tombstone")
	its := items(1, 3, nil)
	its = append(its, thirdparty.Item{ID: "9", Version: 2, Deleted: true})
	within(t, 10*time.Second, func() { out, err = d.Deliver(t.Context(), delivery.Batch{Items: its, Time: time.Unix(1, 0)}) })
	require.NoError(t, err)
	require.Len(t, out.Accepted, 3)
	require.Len(t, out.Rejected, 1)
	require.Equal(t, "9", out.Rejected[0].Item.ID)
	require.Contains(t, out.Rejected[0].Error, "deletes.body: ran past its bound of 100ms (program_timeout)")
	require.Equal(t, []string{`/archive {"ids":["8"],"n":0}`, `/upsert {"ids":["1","2","3"]}`}, got)
}

// mendable is a custom format whose programs a test edits in place, as a
// person edits the configuration.
type mendable struct{ f atomic.Pointer[custom.Format] }

func (m *mendable) Requests(b *thirdparty.Batch) ([]thirdparty.Request, error) {
	return m.f.Load().Requests(b)
}

func (m *mendable) Read(r *thirdparty.Request, a *thirdparty.Answer) (*thirdparty.Result, error) {
	return m.f.Load().Read(r, a)
}

// A request program that fails on every row (here it never ends), fed one
// row at a time as rows written seconds apart come: no row fails; after a
// few strikes the destination is held with the program's error (status's
// refusal and last error, the misconfigured metric) and nothing more is
// rendered; once the program is mended, a probe lets the rows through.
func TestProgramFailingEveryRowOneAtATime(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	got := map[string]bool{}
	url := hostileURL(t, func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Rows []struct {
				ID string `json:"id"`
			} `json:"rows"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		for _, row := range body.Rows {
			got[row.ID] = true
		}
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	build := func(body string) *custom.Format {
		f, err := custom.New(&custom.Config{Request: custom.Request{Path: "/rows", Body: body}, ProgramTimeout: 200 * time.Millisecond})
		require.NoError(t, err)
		return f
	}
	format := &mendable{}
	format.f.Store(build(`{rows: [.items[] | {id, total: (def f: f + 1; f)}]}`))
	db := newDatabase(t)
	m := metrics.New(prometheus.NewRegistry())
	logs := &recorder{}
	d := newDeliverer(t, newClient(t, url, ""), db.shared(t), &delivery.Config{Format: format,
		AuthProbeInterval: time.Minute, Metrics: m.Destination(metrics.DefaultDestination), Logger: slog.New(logs)})

	row := func(i int) delivery.Batch {
		return delivery.Batch{Items: items(i, 1, nil), Time: time.Unix(1, 0), Source: "orders"}
	}
	// Seven rows, each its own batch: the seconds between them are
	// nothing to the rule, which counts rows, not time.
	for i := 1; i <= 7; i++ {
		var out *delivery.Outcome
		var err error
		within(t, 5*time.Second, func() { out, err = d.Deliver(t.Context(), row(i)) })
		require.Nil(t, out, "row %d: no row fails", i)
		var we *delivery.WaitError
		require.ErrorAs(t, err, &we, "row %d", i)
		if i < 3 {
			require.ErrorIs(t, err, delivery.ErrProgramStrike, "row %d", i)
		} else {
			require.ErrorIs(t, err, delivery.ErrProgram, "row %d", i)
		}
		require.ErrorContains(t, err, "request.body: ran past its bound", "row %d", i)
	}
	st := db.state(t)
	require.True(t, st.Configuration.Refused)
	require.Contains(t, st.Configuration.Message, "the request program fails on every row")
	require.Contains(t, st.Configuration.Message, "program_timeout")
	require.Contains(t, st.LastError.Text, "request.body")
	require.InDelta(t, 1, testutil.ToFloat64(m.Misconfigured.WithLabelValues(metrics.DefaultDestination)), 0)
	require.Equal(t, 1, logs.count(slog.LevelError), "the hold said once")
	mu.Lock()
	require.Empty(t, got, "nothing sent")
	mu.Unlock()

	// Mended, and a person asks for a probe (syncer probe): the rows go.
	format.f.Store(build(`{rows: [.items[] | {id}]}`))
	store, err := breakerstore.New(db.pool, nil)
	require.NoError(t, err)
	require.NoError(t, store.SetProbe(t.Context(), breakerstore.Probe{By: "test"}))
	require.Eventually(t, func() bool {
		out, err := d.Deliver(t.Context(), row(1))
		if err != nil {
			require.ErrorIs(t, err, delivery.ErrProgram)
			return false
		}
		return len(out.Accepted) == 1
	}, 10*time.Second, 100*time.Millisecond)
	for i := 2; i <= 7; i++ {
		out, err := d.Deliver(t.Context(), row(i))
		require.NoError(t, err)
		require.Len(t, out.Accepted, 1)
	}
	mu.Lock()
	require.Len(t, got, 7)
	mu.Unlock()
	require.False(t, db.state(t).Configuration.Refused)
	require.Zero(t, testutil.ToFloat64(m.Misconfigured.WithLabelValues(metrics.DefaultDestination)))
	require.Equal(t, 1, logs.countMsg("delivery: the request program renders rows again, and the third party accepts them"))
}

// Once the program has rendered rows, a row alone it fails on is that
// row's fault and fails at once; rows alone failing in a row, with none
// rendered between them, still hold the destination at isolateProbe.
func TestProgramPoisonRowAlone(t *testing.T) {
	t.Parallel()
	url := hostileURL(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	f, err := custom.New(&custom.Config{Request: custom.Request{Body: `{rows: [.items[] | {id, total: (.payload.total | tonumber)}]}`}})
	require.NoError(t, err)
	d := newDeliverer(t, newClient(t, url, ""), nil, &delivery.Config{Format: f, AuthProbeInterval: time.Minute})
	row := func(i int, total string) delivery.Batch {
		return delivery.Batch{Items: []thirdparty.Item{{ID: strconv.Itoa(i), Version: 1, Payload: json.RawMessage(`{"total":"` + total + `"}`)}}, Time: time.Unix(1, 0)}
	}
	out, err := d.Deliver(context.Background(), row(1, "12"))
	require.NoError(t, err)
	require.Len(t, out.Accepted, 1)
	for i := 2; i < 2+7; i++ {
		out, err = deliverJudged(t, d, row(i, "abc"))
		require.NoError(t, err, "row %d", i)
		require.Len(t, out.Rejected, 1, "row %d fails at once", i)
		require.Contains(t, out.Rejected[0].Error, "request.body")
	}
	_, err = d.Deliver(context.Background(), row(9, "abc"))
	require.ErrorIs(t, err, delivery.ErrProgram, "the eighth in a row")
}

// A request program that renders every row alone but fails on the batch
// (here past a size it allows; in production a program slow in the
// batch's size, or the memory bound under load) sends the rows in
// halves: it never renders the same rows together again for good.
func TestProgramFailingOnlyOnTheWholeBatch(t *testing.T) {
	t.Parallel()
	var requests atomic.Int64
	url := hostileURL(t, func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.WriteHeader(http.StatusNoContent)
	})
	f, err := custom.New(&custom.Config{Request: custom.Request{
		Body: `if (.items | length) > 2 then error("too many rows") else {rows: [.items[] | .id]} end`}})
	require.NoError(t, err)
	d := newDeliverer(t, newClient(t, url, ""), nil, &delivery.Config{Format: f})
	var out *delivery.Outcome
	within(t, 10*time.Second, func() {
		out, err = d.Deliver(t.Context(), delivery.Batch{Items: items(1, 5, nil), Time: time.Unix(1, 0)})
	})
	require.NoError(t, err)
	require.Len(t, out.Accepted, 5)
	require.Empty(t, out.Rejected)
	require.EqualValues(t, 3, requests.Load(), "2 + (1 + 2)")
}

// A request program broken for upserts while the deletes program still
// renders tombstones fails no row: a tombstone the deletes program
// rendered is no evidence that the request program renders rows (the
// soak's broken-program fault, seed 803990028, failed 32 orders so).
func TestProgramBrokenForUpsertsWhileTombstonesRender(t *testing.T) {
	t.Parallel()
	url := hostileURL(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	newFormat := func() *custom.Format {
		f, err := custom.New(&custom.Config{
			Request: custom.Request{Path: "/upsert", Body: `error("the request program is broken")`},
			Deletes: &custom.Request{Path: "/archive", Body: `{inputs: [.items[] | {id}]}`},
		})
		require.NoError(t, err)
		return f
	}
	tombstone := func(id int) thirdparty.Item {
		return thirdparty.Item{ID: strconv.Itoa(id), Version: 2, Deleted: true}
	}

	t.Run("a batch of tombstones and rows", func(t *testing.T) {
		t.Parallel()
		d := newDeliverer(t, newClient(t, url, ""), nil, &delivery.Config{Format: newFormat(), AuthProbeInterval: time.Minute})
		b := delivery.Batch{Items: append([]thirdparty.Item{tombstone(1)}, items(2, 3, nil)...), Time: time.Unix(1, 0)}
		var out *delivery.Outcome
		var err error
		within(t, 10*time.Second, func() { out, err = d.Deliver(t.Context(), b) })
		require.ErrorIs(t, err, delivery.ErrProgram)
		if out != nil {
			require.Empty(t, out.Rejected, "no row fails")
		}
	})
	t.Run("a row alone after a tombstone rendered", func(t *testing.T) {
		t.Parallel()
		d := newDeliverer(t, newClient(t, url, ""), nil, &delivery.Config{Format: newFormat(), AuthProbeInterval: time.Minute})
		out, err := d.Deliver(t.Context(), delivery.Batch{Items: []thirdparty.Item{tombstone(1)}, Time: time.Unix(1, 0)})
		require.NoError(t, err)
		require.Len(t, out.Accepted, 1)
		for i := 2; i <= 4; i++ {
			out, err = d.Deliver(t.Context(), delivery.Batch{Items: items(i, 1, nil), Time: time.Unix(1, 0)})
			if out != nil {
				require.Empty(t, out.Rejected, "row %d: no row fails", i)
			}
			if i < 4 {
				require.ErrorIs(t, err, delivery.ErrProgramStrike, "row %d", i)
			} else {
				require.ErrorIs(t, err, delivery.ErrProgram, "row %d", i)
			}
		}
	})
}

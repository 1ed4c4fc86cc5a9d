package tenants_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/delivery"
	syncerformat "github.com/syncer-dev/syncer/internal/formats/syncer"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/tenants"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// factsReads counts the statements that read shared facts by their keys.
type factsReads struct{ n atomic.Int64 }

func (c *factsReads) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "FROM syncer_state WHERE key = ANY($1)") {
		c.n.Add(1)
	}
	return ctx
}

func (c *factsReads) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// Tenants sending read their shared facts together (issue 54): 30
// tenants each sending for 3.5 s read them in a statement per tenant (its
// first) and a statement for all of them every half second, where each
// read its own once a second (30 × 4 and more). A person's pause of one of
// them, written meanwhile by another process, still holds its requests
// within two seconds (docs/operations.md: its deliverer takes the hold
// within a second of its cache), and the others go on.
func TestTenantsSendingReadTheirFactsTogether(t *testing.T) {
	t.Parallel()
	fake := fakethirdparty.New(fakethirdparty.Config{})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	t.Cleanup(fake.Close)
	schema := dbtest.NewMigrated(t)
	cfg, err := pgxpool.ParseConfig(schema.DSN)
	require.NoError(t, err)
	reads := &factsReads{}
	cfg.ConnConfig.Tracer = reads
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	r, err := tenants.New(tenants.Config{Destination: "crm", Pool: pool,
		ThirdParty: thirdparty.Config{URL: srv.URL + "/t/{tenant}", Timeout: 5 * time.Second},
		Delivery:   delivery.Config{Format: syncerformat.Format{}, Installation: "inst-test", MaxInlineWait: time.Millisecond}})
	require.NoError(t, err)
	t.Cleanup(r.Close)

	const n = 30
	const paused = "t7"
	var (
		wg       sync.WaitGroup
		stop     atomic.Bool
		heldAt   atomic.Int64 // when paused's first request was refused as held
		sentPast atomic.Int64 // requests the others sent after the pause
	)
	var pausedAt atomic.Int64
	for i := range n {
		tenant := fmt.Sprint("t", i)
		wg.Go(func() {
			for k := 0; !stop.Load(); k++ {
				d, err := r.For(t.Context(), tenant)
				if err != nil {
					t.Errorf("%s: %v", tenant, err)
					return
				}
				_, err = d.Deliver(t.Context(), delivery.Batch{Items: []thirdparty.Item{{ID: fmt.Sprint(tenant, "-", k), Version: 1, Payload: json.RawMessage(`{"n":1}`)}}, Source: "contacts", Time: time.Unix(1700000000, 0)})
				switch {
				case errors.Is(err, delivery.ErrHeld):
					if tenant == paused {
						heldAt.CompareAndSwap(0, time.Now().UnixNano())
					}
				case err != nil:
					t.Errorf("%s: %v", tenant, err)
					return
				case tenant != paused && pausedAt.Load() != 0:
					sentPast.Add(1)
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
	time.Sleep(1500 * time.Millisecond)
	other, err := breakerstore.New(pool, &breakerstore.Config{Namespace: breakerstore.TenantNamespace("crm", paused)})
	require.NoError(t, err)
	_, err = other.SetHold(t.Context(), breakerstore.Hold{Paused: true, By: "test"})
	require.NoError(t, err)
	pausedAt.Store(time.Now().UnixNano())
	time.Sleep(2500 * time.Millisecond)
	stop.Store(true)
	wg.Wait()

	got := reads.n.Load()
	t.Logf("%d tenants over 4 s: %d statements read shared facts; the pause held after %v", n, got, time.Duration(heldAt.Load()-pausedAt.Load()))
	require.Less(t, got, int64(2*n), "a statement per tenant first, then one for all of them every half second")
	require.NotZero(t, heldAt.Load(), "the pause never held the tenant")
	require.Less(t, time.Duration(heldAt.Load()-pausedAt.Load()), 2*time.Second, "the pause held late")
	require.Positive(t, sentPast.Load(), "the others went on")
}

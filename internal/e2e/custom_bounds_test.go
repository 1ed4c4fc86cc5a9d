package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/status"
)

// A custom format whose request program fails on one row's data (a total
// of "abc") and never ends on another: every other row arrives, those two
// are failed with the program's error as their reason, and nothing is
// left in flight.
func TestCustomProgramPoisonRows(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	recv := newRowIDs(t)
	b.exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, total text NOT NULL, loop boolean NOT NULL DEFAULT false)`)
	cfg := sourcesConfig(t, fmt.Sprintf(`destinations:
  d:
    url: %s
    format: custom
    program_timeout: 300ms
    request:
      path: /rows
      body: '{rows: [.items[] | if .payload.loop then (def f: f + 1; f) else {id, total: (.payload.total | tonumber)} end]}'
sources:
  - {table: orders, key: id, destination: d, batch_size: 50}
`, recv.url), nil)
	b.installSources(t, cfg)
	b.startDaemon(t, func(c *daemon.Config) { c.ThirdParty.URL = ""; c.Sources = cfg })
	b.exec(t, `INSERT INTO orders SELECT g, g::text, false FROM generate_series(1, 200) g`)
	b.exec(t, `UPDATE orders SET total = 'abc' WHERE id = 50`)
	b.exec(t, `UPDATE orders SET loop = true WHERE id = 120`)
	waitFor(t, 60*time.Second, "every good row, and the two failed", func() bool {
		n := recv.count()
		rep, err := status.Gather(context.Background(), b.pool, nil)
		require.NoError(t, err)
		return n >= 198 && rep.Failed >= 2
	})
	require.False(t, recv.has("50"))
	require.False(t, recv.has("120"))
	rep, err := status.Gather(context.Background(), b.pool, nil)
	require.NoError(t, err)
	reasons := map[string]string{}
	for _, f := range rep.RecentFailures {
		reasons[fmt.Sprint(f.ID)] = f.Error
	}
	require.Contains(t, reasons["50"], "request.body")
	require.Contains(t, reasons["120"], "program_timeout")
	require.Zero(t, rep.Pending, "nothing held back behind the poison rows")
}

// A custom destination whose answers wrap a 403 in a 400, as PocketBase's
// batch API does, read with response.refused: a wrong token fails no row
// and holds the destination; the token file mended, every row arrives.
func TestCustomRefusedWrapsA403(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	dir := t.TempDir()
	var mu sync.Mutex
	accepted := map[string]bool{}
	srv := newRecvHandler(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get("Authorization") != "Bearer good-token-value" {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"code":400,"message":"Batch transaction failed.","data":{"requests":{"0":{"code":403,"message":"Only superusers can perform this action."}}}}`)
			return
		}
		var m struct {
			Requests []struct {
				Body struct {
					ID string `json:"id"`
				} `json:"body"`
			} `json:"requests"`
		}
		_ = json.Unmarshal(body, &m)
		mu.Lock()
		for _, q := range m.Requests {
			accepted[q.Body.ID] = true
		}
		mu.Unlock()
		_, _ = io.WriteString(w, `[]`)
	})
	tokenPath := secretFile(t, dir, "token", "a-wrong-token")
	b.exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, total int NOT NULL)`)
	cfg := sourcesConfig(t, fmt.Sprintf(`destinations:
  pb:
    url: %s
    format: custom
    token_file: %s
    request:
      path: /api/batch
      body: '{requests: [.items[] | {method: "PUT", url: "/api/collections/orders/records", body: {id: .id, total: .payload.total}}]}'
    response:
      refused: '.status == 400 and ([.body.data.requests[]?.code] | any(. == 401 or . == 403))'
sources:
  - {table: orders, key: id, destination: pb}
`, srv, tokenPath), nil)
	b.installSources(t, cfg)
	b.startDaemon(t, func(c *daemon.Config) {
		c.ThirdParty.URL = ""
		c.Sources = cfg
		c.Delivery.AuthProbeInterval = 2 * time.Second
	})
	b.exec(t, `INSERT INTO orders SELECT g, g FROM generate_series(1, 30) g`)
	waitFor(t, 30*time.Second, "the destination held for its credentials", func() bool {
		rep, err := status.Gather(context.Background(), b.pool, nil)
		require.NoError(t, err)
		for _, d := range rep.Destinations {
			if d.Credentials.Refused && strings.Contains(d.Credentials.Message, "response.refused") {
				return true
			}
		}
		return false
	})
	rep, err := status.Gather(context.Background(), b.pool, nil)
	require.NoError(t, err)
	require.Zero(t, rep.Failed, "a refused token fails no row")
	require.NoError(t, replaceFile(dir, tokenPath, "good-token-value"))
	waitFor(t, 60*time.Second, "every row once the token is mended", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(accepted) >= 30
	})
	rep, err = status.Gather(context.Background(), b.pool, nil)
	require.NoError(t, err)
	require.Zero(t, rep.Failed)
}

// Issue 42, point 4: a request program that fails on every row (here it
// never ends), with rows written one at a time seconds apart, fails no
// row: the destination is held with the program's error, and the rows
// stay pending. The program mended (a new daemon on the edited file),
// every row arrives.
func TestCustomProgramBrokenForEveryRowOneAtATime(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	recv := newRowIDs(t)
	b.exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, total text NOT NULL)`)
	file := func(body string) *config.Config {
		return sourcesConfig(t, fmt.Sprintf(`destinations:
  d:
    url: %s
    format: custom
    program_timeout: 200ms
    request:
      path: /rows
      body: '%s'
sources:
  - {table: orders, key: id, destination: d}
`, recv.url, body), nil)
	}
	broken := file(`{rows: [.items[] | {id, total: (def f: f + 1; f)}]}`)
	b.installSources(t, broken)
	first := b.startDaemon(t, func(c *daemon.Config) { c.ThirdParty.URL = ""; c.Sources = broken })
	for i := 1; i <= 7; i++ {
		b.exec(t, fmt.Sprintf(`INSERT INTO orders VALUES (%d, '%d')`, i, i))
		time.Sleep(500 * time.Millisecond)
	}
	held := func() (bool, *status.Report) {
		rep, err := status.Gather(context.Background(), b.pool, nil)
		require.NoError(t, err)
		for _, d := range rep.Destinations {
			if d.Configuration.Refused && strings.Contains(d.Configuration.Message, "the request program fails on every row") {
				return true, rep
			}
		}
		return false, rep
	}
	waitFor(t, 30*time.Second, "the destination held for its program", func() bool { ok, _ := held(); return ok })
	_, rep := held()
	require.Zero(t, rep.Failed, "a program failing on every row fails no row")
	require.Equal(t, int64(7), rep.Pending)
	for _, d := range rep.Destinations {
		if d.Name == "d" {
			require.Contains(t, d.Stopped(), "program_timeout")
		}
	}
	require.NoError(t, first.stop())

	mended := file(`{rows: [.items[] | {id, total: .payload.total}]}`)
	b.startDaemon(t, func(c *daemon.Config) { c.ThirdParty.URL = ""; c.Sources = mended })
	waitFor(t, 60*time.Second, "every row once the program is mended", func() bool {
		return recv.count() == 7
	})
	waitFor(t, 30*time.Second, "nothing pending, nothing failed", func() bool {
		rep, err := status.Gather(context.Background(), b.pool, nil)
		require.NoError(t, err)
		return rep.Pending == 0 && rep.Failed == 0
	})
}

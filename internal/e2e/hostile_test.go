package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// The third party as it is met in the wild: every test here asserts what was
// delivered and that nothing was marked synced that the third party did not
// store.

// debugLogger logs at debug into l.
func debugLogger(l *dbtest.Buffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func (b *bundle) count(t *testing.T, where string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM resources WHERE `+where).Scan(&n))
	return n
}

func TestHostileRedirectMarksNothing(t *testing.T) {
	t.Parallel()
	for _, code := range []int{http.StatusMovedPermanently, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			t.Parallel()
			b := setup(t, fakethirdparty.Config{Redirect: code})
			b.insert(t, 100, 4)
			logs := &dbtest.Buffer{}
			b.startDaemon(t, func(c *daemon.Config) {
				c.Exporter.BatchSize = 10
				c.Delivery.AuthProbeInterval = 300 * time.Millisecond
				c.Logger = debugLogger(logs)
			})
			// The refusal is stored first and logged after: the store can
			// be read before the line is written, so wait for both.
			waitFor(t, 30*time.Second, "the redirect reported", func() bool {
				st, err := breakerstore.ReadState(context.Background(), b.pool)
				require.NoError(t, err)
				return st.Configuration.Refused && b.fake.Stats().Requests >= 3 && strings.Contains(logs.String(), fmt.Sprint(code))
			})
			require.Zero(t, b.count(t, "synced_at IS NOT NULL"), "nothing marked synced behind a redirect")
			require.Zero(t, b.count(t, "failed_at IS NOT NULL"), "no row failed for a configuration error")
			require.Zero(t, b.fake.Stats().ItemsAccepted)
			require.Contains(t, logs.String(), fmt.Sprint(code), "the status code is in the log")

			// The operator fixes the URL: everything goes, probed in time.
			b.fake.SetConfig(fakethirdparty.Config{})
			b.waitDrained(t, time.Minute)
			require.Len(t, b.fake.Latest(), 100)
		})
	}
}

func TestHostileTwoHundredsThatAreNotAnswersMarkNothing(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{
		fakethirdparty.BadAnswerHTML, fakethirdparty.BadAnswerMalformed, fakethirdparty.BadAnswerHuge,
		fakethirdparty.BadAnswerUnknownStatus, fakethirdparty.BadAnswerUnknownID,
	} {
		t.Run(bad, func(t *testing.T) {
			t.Parallel()
			b := setup(t, fakethirdparty.Config{BadAnswer: bad})
			b.insert(t, 40, 4)
			b.startDaemon(t, func(c *daemon.Config) {
				c.Exporter.BatchSize = 10
				c.Delivery.BackoffInitial = 20 * time.Millisecond
				c.Delivery.BackoffMax = 100 * time.Millisecond
				c.Delivery.BreakerOpenTimeout = 300 * time.Millisecond
			})
			waitFor(t, 30*time.Second, "bad answers", func() bool { return b.fake.Stats().BadAnswers >= 4 })
			require.Zero(t, b.count(t, "synced_at IS NOT NULL"), "a 2xx that is not the contract's answer accepts nothing")
			require.Zero(t, b.count(t, "failed_at IS NOT NULL"))

			b.fake.SetConfig(fakethirdparty.Config{})
			b.waitDrained(t, time.Minute)
			require.Len(t, b.fake.Latest(), 40)
			require.Zero(t, b.fake.Stats().DuplicatesOtherKey, "retried under the same keys")
		})
	}
}

func TestHostileRetryAfterIsCapped(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{"999999999", "Fri, 31 Dec 9999 23:59:59 GMT"} {
		t.Run(raw, func(t *testing.T) {
			t.Parallel()
			const maxWait = 2 * time.Second
			b := setup(t, fakethirdparty.Config{RateLimit: 1, RateBurst: 1, RetryAfterRaw: raw})
			b.insert(t, 30, 2)
			logs := &dbtest.Buffer{}
			b.startDaemon(t, func(c *daemon.Config) {
				c.Exporter.BatchSize = 10
				c.Delivery.MaxRetryAfter = maxWait
				c.Logger = debugLogger(logs)
			})
			b.waitDrained(t, time.Minute)
			require.Len(t, b.fake.Latest(), 30, "resumed after the cap, not after the third party's wait")
			require.Contains(t, logs.String(), raw, "the capped wait is logged with its raw value")
			// Nothing went out during a pause: after a 429, no request
			// arrived until the cap had passed, but those already on their
			// way when it was answered (four may be in flight).
			reqs := b.fake.Requests()
			for _, r := range reqs {
				if r.Status != http.StatusTooManyRequests {
					continue
				}
				during := requestsBetween(reqs, r.At.Add(100*time.Millisecond), r.At.Add(maxWait-100*time.Millisecond))
				require.Empty(t, during, "requests sent during the pause that followed the 429 at %s", r.At)
			}
		})
	}
}

func TestHostileTwoInstallationsShareNoKey(t *testing.T) {
	t.Parallel()
	// Staging and production, two schemas, the same ids and payloads, one
	// third party that honours keys: each installation's rows are stored.
	one := setup(t, fakethirdparty.Config{})
	two := setup(t, fakethirdparty.Config{})
	for _, b := range []*bundle{one, two} {
		_, err := b.pool.Exec(context.Background(), `INSERT INTO resources (id, payload)
			SELECT g, jsonb_build_object('n', g) FROM generate_series(1, 100) g`)
		require.NoError(t, err)
		b.startDaemon(t, func(c *daemon.Config) {
			c.ThirdParty.URL = one.fakeURL
			c.Exporter.BatchSize = 10
		})
	}
	one.waitDrained(t, time.Minute)
	two.waitDrained(t, time.Minute)
	st := one.fake.Stats()
	require.Zero(t, st.KeyReplays, "no installation was answered from the other's cache")
	require.EqualValues(t, 200, st.ItemsAccepted, "each installation's 100 rows were stored")
}

func TestHostileSecretsStaySecret(t *testing.T) {
	t.Parallel()
	const token = "tok-S3CRET-value"
	const apiKey = "apikey-S3CRET"

	t.Run("in URLs and transport errors", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		dead := ln.Addr().String()
		require.NoError(t, ln.Close())
		b := setup(t, fakethirdparty.Config{})
		b.insert(t, 5, 1)
		logs := &dbtest.Buffer{}
		b.startDaemon(t, func(c *daemon.Config) {
			c.ThirdParty.URL = "http://user:" + apiKey + "@" + dead + "/?api_key=" + apiKey
			c.ThirdParty.Token = token
			c.Delivery.BackoffInitial = 10 * time.Millisecond
			c.Delivery.BackoffMax = 50 * time.Millisecond
			c.Logger = debugLogger(logs)
		})
		waitFor(t, 30*time.Second, "a transport error logged", func() bool {
			return strings.Contains(logs.String(), "connect")
		})
		require.NotContains(t, logs.String(), apiKey)
		require.NotContains(t, logs.String(), token)
		st, err := breakerstore.ReadState(context.Background(), b.pool)
		require.NoError(t, err)
		require.NotContains(t, st.LastError.Text, apiKey)
	})

	t.Run("echoed by the third party", func(t *testing.T) {
		t.Parallel()
		// A third party that echoes the Authorization header and forges
		// lines with a newline and a terminal escape in every rejection.
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var req struct {
				Items []struct {
					ID string `json:"id"`
				} `json:"items"`
			}
			body, _ := io.ReadAll(r.Body)
			_ = json.Unmarshal(body, &req)
			type result struct {
				ID     string `json:"id"`
				Status string `json:"status"`
				Error  string `json:"error"`
			}
			var res struct {
				Results []result `json:"results"`
			}
			for _, it := range req.Items {
				// A reason of each row's own: one reason for every row would
				// be a rejection storm, which fails no row.
				res.Results = append(res.Results, result{ID: it.ID, Status: "rejected",
					Error: "row " + it.ID + ": bad auth " + r.Header.Get("Authorization") + "\nlevel=ERROR msg=forged \x1b[31m" + strings.Repeat("x", 1<<20)})
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(res)
		}))
		t.Cleanup(srv.Close)
		b := setup(t, fakethirdparty.Config{})
		b.insert(t, 5, 1)
		logs := &dbtest.Buffer{}
		b.startDaemon(t, func(c *daemon.Config) {
			c.ThirdParty.URL = srv.URL
			c.ThirdParty.Token = token
			c.Logger = debugLogger(logs)
		})
		waitFor(t, 30*time.Second, "rejections recorded", func() bool { return b.count(t, "failed_at IS NOT NULL") == 5 })
		var longest int
		var leaked, raw bool
		rows, err := b.pool.Query(context.Background(), `SELECT sync_error FROM resources`)
		require.NoError(t, err)
		for rows.Next() {
			var msg string
			require.NoError(t, rows.Scan(&msg))
			longest = max(longest, len(msg))
			leaked = leaked || strings.Contains(msg, token)
			raw = raw || strings.ContainsAny(msg, "\n\x1b")
		}
		require.NoError(t, rows.Err())
		require.False(t, leaked, "the token never reaches the database")
		require.False(t, raw, "control characters are escaped")
		require.LessOrEqual(t, longest, 4096, "error text is bounded")
		require.NotContains(t, logs.String(), token)
		require.NotContains(t, logs.String(), "\nlevel=ERROR msg=forged")
	})
}

func TestHostileSixtyFourMiBRowHaltsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	// Rows before and after a 64 MiB row, and one of 6 MiB, larger than a
	// batch's byte budget but under the item cap: it goes alone.
	_, err := b.pool.Exec(context.Background(), `INSERT INTO resources (id, payload)
		SELECT g, jsonb_build_object('n', g) FROM generate_series(1, 100) g`)
	require.NoError(t, err)
	_, err = b.pool.Exec(context.Background(), `INSERT INTO resources (id, payload) VALUES
		(50000, jsonb_build_object('big', repeat(md5('x'), (64 << 20) / 32))),
		(50001, jsonb_build_object('mid', repeat(md5('y'), (6 << 20) / 32)))`)
	require.NoError(t, err)
	_, err = b.pool.Exec(context.Background(), `INSERT INTO resources (id, payload)
		SELECT g, jsonb_build_object('n', g) FROM generate_series(100001, 100100) g`)
	require.NoError(t, err)
	b.startDaemon(t, func(c *daemon.Config) {
		c.Exporter.BatchSize = 500
		c.Exporter.BatchMaxBytes = 4 << 20
	})
	waitFor(t, time.Minute, "every row synced or failed", func() bool {
		return b.count(t, "synced_at IS NULL AND failed_at IS NULL") == 0
	})
	require.Equal(t, 201, b.count(t, "synced_at IS NOT NULL"), "every small row and the 6 MiB one were exported")
	require.Equal(t, 1, b.count(t, "id = 50000 AND failed_at IS NOT NULL AND sync_error LIKE '%SYNCER_MAX_ITEM_BYTES%'"),
		"the 64 MiB row is recorded failed with the reason, never sent")
	_, sent := b.fake.Latest()[50000]
	require.False(t, sent)
}

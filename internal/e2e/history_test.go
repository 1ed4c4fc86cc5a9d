package e2e

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/history"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// A row's story through an insert, an update answered 429 then accepted,
// an update the third party rejects, retry-failed, and a delete: every
// version with its attempts and settlement, in the table, in `syncer
// history` and in its --json.
func TestHistoryOfARow(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	b.startDaemon(t, nil)
	ctx := context.Background()
	var id int64
	require.NoError(t, b.pool.QueryRow(ctx, `INSERT INTO resources (payload) VALUES ('{"n": 1}') RETURNING id`).Scan(&id))
	key := strconv.FormatInt(id, 10)
	story := func() history.Story {
		st, err := history.Lookup(ctx, b.pool, "resources", key, 0)
		require.NoError(t, err)
		return st
	}
	settled := func(v int64, want string) func() bool {
		return func() bool {
			for _, x := range story().Versions {
				if x.Version == v {
					return x.Settled == want
				}
			}
			return false
		}
	}
	waitFor(t, 30*time.Second, "version 1 accepted", settled(1, history.Accepted))

	// 429s: the version waits, and the story says why, then goes.
	b.fake.SetConfig(fakethirdparty.Config{FailureRate: 1, FailureStatus: 429})
	_, err := b.pool.Exec(ctx, `UPDATE resources SET payload = '{"n": 2}' WHERE id = $1`, id)
	require.NoError(t, err)
	// The batch retries within its push: its story is written once
	// it is answered.
	waitFor(t, 30*time.Second, "a 429 answered", func() bool {
		return b.fake.Stats().RequestsByStatus["429"] >= 1
	})
	b.fake.SetConfig(fakethirdparty.Config{})
	waitFor(t, 30*time.Second, "version 2 accepted", settled(2, history.Accepted))

	// A rejection, then retry-failed once the third party takes it.
	b.fake.SetConfig(fakethirdparty.Config{RejectField: "bad"})
	_, err = b.pool.Exec(ctx, `UPDATE resources SET payload = '{"bad": 3}' WHERE id = $1`, id)
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "version 3 failed", settled(3, history.Failed))
	b.fake.SetConfig(fakethirdparty.Config{})
	b.syncer(t, "retry-failed", "--id", key)
	waitFor(t, 30*time.Second, "version 3 accepted on retry", settled(3, history.Accepted))

	_, err = b.pool.Exec(ctx, `DELETE FROM resources WHERE id = $1`, id)
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "the delete accepted", func() bool {
		vs := story().Versions
		return len(vs) == 4 && vs[3].Deleted && vs[3].Settled == history.Accepted
	})

	st := story()
	outcomes := func(v history.Version) []string {
		var out []string
		for _, e := range v.Entries {
			out = append(out, e.Outcome)
		}
		return out
	}
	require.Equal(t, []string{history.Accepted}, outcomes(st.Versions[0]))
	v2 := outcomes(st.Versions[1])
	require.Contains(t, v2, history.RateLimited)
	require.Equal(t, history.Accepted, v2[len(v2)-1])
	require.Equal(t, []string{history.Failed, history.Accepted}, outcomes(st.Versions[2]), "the failure stays in the story after its retry")
	failed := st.Versions[2].Entries[0]
	require.Equal(t, "field bad is not allowed", failed.Reason)
	require.NotNil(t, failed.Status)
	require.Equal(t, 200, *failed.Status)
	for _, v := range st.Versions {
		for _, e := range v.Entries {
			require.NotEmpty(t, e.BatchKey, "every attempt names its Idempotency-Key")
			require.NotNil(t, e.LatencyMS)
			require.NotNil(t, e.BatchedAt)
			require.Equal(t, "default", e.Destination)
		}
	}
	for _, e := range st.Versions[1].Entries {
		if e.Outcome == history.RateLimited {
			require.Equal(t, 429, *e.Status)
		}
	}

	text := b.syncer(t, "history", "--key", key)
	require.Contains(t, text, "resources key "+key+": 4 versions")
	require.Contains(t, text, "version 3: accepted, captured 20", "with the time it was captured")
	require.Contains(t, text, "version 4 (delete): accepted, captured 20")
	require.Contains(t, text, "rate-limited")
	require.Contains(t, text, "HTTP 429")
	require.Contains(t, text, "reason: field bad is not allowed")

	var got history.Story
	require.NoError(t, json.Unmarshal([]byte(b.syncer(t, "history", "--source", "resources", "--key", key, "--json")), &got))
	require.Equal(t, "resources", got.Feed)
	require.Len(t, got.Versions, 4)
	require.Equal(t, history.Failed, got.Versions[2].Entries[0].Outcome)
	for _, v := range got.Versions {
		require.NotNil(t, v.Captured, "version %d's capture time", v.Version)
		require.False(t, v.Captured.After(v.Entries[0].At), "version %d captured before it went", v.Version)
	}
}

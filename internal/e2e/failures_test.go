package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/cli"
	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// syncer runs the command line against the bundle's database and returns
// its standard output.
func (b *bundle) syncer(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	code := cli.Main(context.Background(), append(args, "--database-url", b.dsn, "--log-level", "error"), &out, &errb)
	require.Equal(t, 0, code, errb.String())
	return out.String()
}

// A source's rows the third party rejects show in status (text and JSON)
// with their source, key, version, destination and the third party's own
// reason; retry-failed --source --key sends again the keys named only,
// which then arrive, while the others stay failed.
func TestSourceFailuresShownAndRetriedByKey(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	dest := newDestination(t, fakethirdparty.Config{RejectField: "body"})
	cfg := b.installNotesToCRM(t, dest.url)
	logs := &dbtest.Buffer{}
	b.startDaemon(t, func(c *daemon.Config) {
		c.Sources = cfg
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	b.exec(t, `INSERT INTO notes VALUES (1, 'one'), (2, 'two'), (3, 'three')`)
	waitFor(t, 60*time.Second, "three failed keys", func() bool {
		return b.sourceStats(t)["notes"].FailedKeys == 3
	})
	// The daemon's warning names the source and a key to look for.
	require.Regexp(t, `level=WARN msg="exporter: items rejected by the third party" source=notes key=[123] version=[0-9]+ rejected=[123] error="field body is not allowed"`, logs.String())

	var rep struct {
		Failures []struct {
			Source, Destination, Error string
			ID                         any
			Version                    int64
			FailedAt                   time.Time `json:"failed_at"`
		} `json:"recent_failures"`
	}
	require.NoError(t, json.Unmarshal([]byte(b.syncer(t, "status", "--json")), &rep))
	require.Len(t, rep.Failures, 3)
	for i, f := range rep.Failures {
		require.Equal(t, "notes", f.Source)
		require.Equal(t, "crm", f.Destination)
		require.Equal(t, "field body is not allowed", f.Error, "the third party's own reason")
		require.IsType(t, "", f.ID, "a source's key is its text")
		require.Positive(t, f.Version)
		require.False(t, f.FailedAt.IsZero())
		if i > 0 {
			require.False(t, f.FailedAt.After(rep.Failures[i-1].FailedAt), "latest first")
		}
	}
	text := b.syncer(t, "status")
	require.Contains(t, text, "failed key 2 of source notes")
	require.Contains(t, text, "field body is not allowed")
	require.NotContains(t, text, `\n`)

	dest.fake.SetConfig(fakethirdparty.Config{})
	require.Contains(t, b.syncer(t, "retry-failed", "--source", "notes", "--key", "2"), "1 failed key is eligible again")
	waitFor(t, 60*time.Second, "key 2 arrives", func() bool {
		return len(byID(dest.fake)["2"]) == 1
	})
	b.waitSourcesDrained(t, "notes")
	require.EqualValues(t, 2, b.sourceStats(t)["notes"].FailedKeys, "the keys not named stay failed")
	require.JSONEq(t, `{"id": 2, "body": "two"}`, string(dest.payloads(t)["2"]))
	accepted := byID(dest.fake)
	require.Equal(t, []string{"2"}, keys(accepted), "only the key named was sent again")
	r := b.report(t)
	require.Len(t, r.RecentFailures, 2)
	for _, f := range r.RecentFailures {
		require.NotEqual(t, "2", f.ID)
	}
	requireOnceInOrder(t, dest.fake)
	require.False(t, strings.HasSuffix(r.RecentFailures[0].Error, `\n`))
}

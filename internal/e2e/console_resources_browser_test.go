package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/console"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/replays"
)

// TestConsoleRetriesAndReplaysResourcesInBrowser: in Debian's chromium,
// resources is retried and replayed from its page like any source (issue
// 46): its failed row shows with the third party's reason and a retry
// button, the retried row arrives; a replay by id range is counted first,
// started from the form, and its rows arrive once more, through the same
// replay model as the command line's.
func TestConsoleRetriesAndReplaysResourcesInBrowser(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{RejectField: "bad"})
	s := &consoleSetup{bundle: b, dest: newDestination(t, fakethirdparty.Config{}), logs: &dbtest.Buffer{}}
	cfg := b.installNotesToCRM(t, s.dest.url)
	s.base = s.startDaemon(t, cfg, consoleToken, func(c *console.Config) { c.Refresh = time.Hour })
	b.exec(t, `INSERT INTO resources (id, payload) VALUES (1, '{"bad": true}')`)
	b.exec(t, `INSERT INTO resources (id, payload) SELECT g, jsonb_build_object('n', g) FROM generate_series(2, 6) g`)
	waitFor(t, 60*time.Second, "the rejected row of resources failed and the rest arrived", func() bool {
		failed := false
		for _, f := range b.report(t).RecentFailures {
			failed = failed || (f.Source == "resources" && f.ID == "1")
		}
		return failed && len(byID(b.fake)) == 5
	})
	b.fake.SetConfig(fakethirdparty.Config{})
	ctx := browser(t)

	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(s.base+"/console/sources/resources"),
		chromedp.WaitVisible(chromedp.CSS(`input[name=token]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=token]`), consoleToken),
		chromedp.Click(chromedp.CSS(`#signin`)),
		chromedp.WaitVisible(chromedp.CSS(`#retry-all`)),
	))
	require.Contains(t, textOf(t, ctx, `#failures`), "field bad is not allowed")
	shot(t, ctx, "resources")

	// Retry the failed row by its key (its id): it arrives.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.Search(`//tr[td[@class="key" and normalize-space()="1"]]//button`)),
		chromedp.WaitVisible(chromedp.CSS(`#flash`)),
	))
	require.Contains(t, textOf(t, ctx, `#flash`), "1 failed key of source resources is eligible again")
	waitFor(t, 60*time.Second, "the retried row arrives", func() bool { return len(byID(b.fake)["1"]) == 1 })

	// A replay of ids 2 to 4, counted first, started from the form.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(s.base+"/console/sources/resources"),
		chromedp.Click(chromedp.CSS(`#replay-link`)),
		chromedp.WaitVisible(chromedp.CSS(`#replay-form`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=from]`), "2"),
		chromedp.SendKeys(chromedp.CSS(`input[name=to]`), "4"),
		chromedp.Click(chromedp.CSS(`#dry-run`)),
		chromedp.WaitVisible(chromedp.CSS(`#count`)),
	))
	require.Contains(t, textOf(t, ctx, `#count`), "counts 3 keys")
	shot(t, ctx, "resources-replay")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#start-replay`)),
		chromedp.WaitVisible(chromedp.CSS(`#flash`)),
	))
	flash := textOf(t, ctx, `#flash`)
	require.Contains(t, flash, "3 rows of source resources")
	waitFor(t, 60*time.Second, "the replay's rows arrive again", func() bool {
		got := byID(b.fake)
		return len(got["2"]) == 2 && len(got["3"]) == 2 && len(got["4"]) == 2
	})
	require.Len(t, byID(b.fake)["5"], 1, "a row outside the range is not sent again")
	all, err := replays.List(t.Context(), b.pool)
	require.NoError(t, err)
	require.Len(t, all, 1)
	waitFor(t, 30*time.Second, "the replay shows done on the page", func() bool {
		require.NoError(t, chromedp.Do(ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`#replays`))))
		row := textOf(t, ctx, `#replays`)
		return strings.Contains(row, "resources") && strings.Contains(row, "done") && strings.Contains(row, "3 of 3")
	})
}

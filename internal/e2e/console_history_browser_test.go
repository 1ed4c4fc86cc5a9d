package e2e

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/console"
	"github.com/syncer-dev/syncer/internal/history"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// TestConsoleFindsAKeysHistoryInBrowser: in Debian's chromium, a failed
// key of a source links to its story, which shows the third party's
// reason; once retried and changed again, the key search of the overview
// finds the same story `syncer history` prints: the failure, the retry
// accepted, the next version accepted.
func TestConsoleFindsAKeysHistoryInBrowser(t *testing.T) {
	t.Parallel()
	s := startConsole(t, fakethirdparty.Config{RejectField: "body"}, consoleToken, func(c *console.Config) { c.Refresh = time.Hour })
	b := s.bundle
	b.exec(t, `INSERT INTO notes VALUES (7, 'hello')`)
	var first int64
	waitFor(t, 60*time.Second, "key 7 failed", func() bool {
		st, err := history.Lookup(context.Background(), b.pool, "notes", "7", 0)
		require.NoError(t, err)
		if len(st.Versions) != 1 || st.Versions[0].Settled != history.Failed {
			return false
		}
		first = st.Versions[0].Version
		return true
	})
	ctx := browser(t)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(s.base+"/console"),
		chromedp.WaitVisible(chromedp.CSS(`input[name=token]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=token]`), consoleToken),
		chromedp.Click(chromedp.CSS(`#signin`)),
		chromedp.WaitVisible(chromedp.CSS(`#failures a.story`)),
		chromedp.Click(chromedp.CSS(`#failures a.story`)),
		chromedp.WaitVisible(chromedp.CSS(`#story`)),
	))
	story := textOf(t, ctx, `#story`)
	require.Regexp(t, `version \d+: failed`, story)
	require.Contains(t, story, "field body is not allowed")

	s.dest.fake.SetConfig(fakethirdparty.Config{})
	b.syncer(t, "retry-failed", "--source", "notes", "--key", "7")
	// A source's retry sends the key again as a version of its own.
	newest := func(after int64) func() bool {
		return func() bool {
			st, err := history.Lookup(context.Background(), b.pool, "notes", "7", 0)
			require.NoError(t, err)
			n := len(st.Versions)
			return n > 0 && st.Versions[n-1].Version > after && st.Versions[n-1].Settled == history.Accepted
		}
	}
	waitFor(t, 60*time.Second, "key 7 accepted on retry", newest(first))
	st, err := history.Lookup(context.Background(), b.pool, "notes", "7", 0)
	require.NoError(t, err)
	retried := st.Versions[len(st.Versions)-1].Version
	b.exec(t, `UPDATE notes SET body = 'hello again' WHERE id = 7`)
	waitFor(t, 60*time.Second, "the next version accepted", newest(retried))
	st, err = history.Lookup(context.Background(), b.pool, "notes", "7", 0)
	require.NoError(t, err)
	v2 := st.Versions[len(st.Versions)-1].Version

	// The overview's search finds the key.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(s.base+"/console"),
		chromedp.WaitVisible(chromedp.CSS(`#find-key`)),
		chromedp.SetValue(chromedp.CSS(`#find-key select`), "notes"),
		chromedp.SendKeys(chromedp.CSS(`#find-key input[name=key]`), "7"),
		chromedp.Click(chromedp.CSS(`#find-key-button`)),
		chromedp.WaitVisible(chromedp.CSS(`#story`)),
	))
	story = textOf(t, ctx, `#story`)
	require.Contains(t, story, "version "+strconv.FormatInt(first, 10)+": superseded", "the retry sent it again as a newer version")
	require.Contains(t, story, "version "+strconv.FormatInt(retried, 10)+": accepted")
	require.Contains(t, story, "field body is not allowed", "the failure stays in the story")
	require.Contains(t, story, "version "+strconv.FormatInt(v2, 10)+": accepted")
	shot(t, ctx, "history")

	// A key that is not one says so.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(s.base+"/console/history?source=resources&key=abc"),
		chromedp.WaitVisible(chromedp.CSS(`#story-message`)),
	))
	require.Contains(t, textOf(t, ctx, `#story-message`), "row id")
}

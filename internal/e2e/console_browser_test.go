package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/console"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// updateScreenshots, set to 1, makes the browser test write the console's
// screenshots under docs/console/ (docs/console.md shows them).
const updateScreenshots = "SYNCER_UPDATE_SCREENSHOTS"

// browser starts Debian's chromium, headless, with a fresh profile, and
// returns a context driving one tab of it. Without chromium the test
// fails: make test and .ci/run install it.
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	require.NoError(t, err, "chromium is not installed: apt-get install -y chromium (make test and .ci/run install it)")
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(cancelTab)
	require.NoError(t, chromedp.Do(ctx), "start chromium")
	return ctx
}

// shot writes a screenshot of the page as docs/console/NAME.png when
// SYNCER_UPDATE_SCREENSHOTS=1.
func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if os.Getenv(updateScreenshots) != "1" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	dir := filepath.Join("..", "..", "docs", "console")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644))
}

// textOf returns the text of the first node matching sel.
func textOf(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	require.NoError(t, err)
	return s
}

// In a real browser: sign in; see a destination that refuses its token
// and a source with a failed row and the third party's reason; retry that
// row from the source's page and see it arrive at the fake; pause a
// destination, see nothing arrive while written rows stay pending, resume
// and see them arrive; count a key range and start its replay from the
// form; probe the refusing destination once its token is fixed.
func TestConsoleInBrowser(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	s := &consoleSetup{bundle: b, dest: newDestination(t, fakethirdparty.Config{RejectField: "body"}), logs: &dbtest.Buffer{}}
	hooks := newDestination(t, fakethirdparty.Config{Token: "the-right-token"})
	b.exec(t, `CREATE TABLE notes (id bigint PRIMARY KEY, body text)`)
	b.exec(t, `CREATE TABLE events (id bigint PRIMARY KEY, kind text)`)
	cfg := sourcesConfig(t, fmt.Sprintf(`destinations:
  crm:
    url: %s
  hooks:
    url: %s
    token_env: HOOKS_TOKEN
sources:
  - {table: notes, key: id, destination: crm}
  - {table: events, key: id, destination: hooks}
`, s.dest.url, hooks.url), map[string]string{"HOOKS_TOKEN": "a-stale-token"})
	b.installSources(t, cfg)
	s.base = s.startDaemon(t, cfg, consoleToken, func(c *console.Config) {
		c.Formats["hooks"] = "syncer"
		c.SampleEvery = 200 * time.Millisecond // a chart with points within the test
		// A page reloading itself under a click detaches the node the
		// click was aimed at; the test reloads when it wants fresh figures.
		c.Refresh = time.Hour
	})
	b.exec(t, `INSERT INTO notes VALUES (1, 'one')`)
	waitFor(t, 60*time.Second, "the rejected row failed", func() bool { return b.sourceStats(t)["notes"].FailedKeys == 1 })
	s.dest.fake.SetConfig(fakethirdparty.Config{})
	b.exec(t, `INSERT INTO notes VALUES (2, 'two'), (3, 'three')`)
	b.exec(t, `INSERT INTO events VALUES (1, 'signup')`)
	b.waitSourcesDrained(t, "notes")
	waitFor(t, 60*time.Second, "hooks refuses the token", func() bool {
		r := b.report(t)
		for _, d := range r.Destinations {
			if d.Name == "hooks" {
				return d.Credentials.Refused
			}
		}
		return false
	})
	ctx := browser(t)

	// Sign in: the form sends us on to the page asked for.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(s.base+"/console"),
		chromedp.WaitVisible(chromedp.CSS(`input[name=token]`)),
	))
	shot(t, ctx, "signin")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`input[name=token]`), consoleToken),
		chromedp.Click(chromedp.CSS(`#signin`)),
		chromedp.WaitVisible(chromedp.CSS(`#destinations`)),
	))
	dests := textOf(t, ctx, `#destinations`)
	require.Contains(t, dests, "REFUSED", "the destination refusing its token")
	failures := textOf(t, ctx, `#failures`)
	require.Contains(t, failures, "field body is not allowed", "the failed row's reason")
	require.Contains(t, textOf(t, ctx, `#sources`), "notes")
	shot(t, ctx, "overview")

	// The source's page: retry the failed key; it arrives at the fake.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`a[href="/console/sources/notes"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#failures`)),
	))
	require.Contains(t, textOf(t, ctx, `#failures`), "field body is not allowed")
	shot(t, ctx, "source")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.Search(`//tr[td[@class="key" and normalize-space()="1"]]//button`)),
		chromedp.WaitVisible(chromedp.CSS(`#flash`)),
	))
	require.Contains(t, textOf(t, ctx, `#flash`), "1 failed key of source notes is eligible again")
	waitFor(t, 60*time.Second, "the retried row arrives", func() bool { return len(byID(s.dest.fake)["1"]) == 1 })

	// Pause crm: rows written meanwhile stay pending, nothing arrives.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(s.base+"/console/destinations/crm"),
		chromedp.Click(chromedp.CSS(`#pause`)),
		chromedp.WaitVisible(chromedp.CSS(`#resume`)),
	))
	require.Contains(t, textOf(t, ctx, `#paused`), "PAUSED by console")
	time.Sleep(2 * time.Second) // the daemon reads the shared facts every second
	before := len(s.dest.fake.Deliveries())
	b.exec(t, `INSERT INTO notes SELECT g, 'while paused' FROM generate_series(10, 19) g`)
	time.Sleep(3 * time.Second)
	require.Len(t, s.dest.fake.Deliveries(), before, "nothing arrives while paused")
	require.EqualValues(t, 10, b.sourceStats(t)["notes"].PendingKeys, "the rows are kept pending")
	require.NoError(t, chromedp.Do(ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`#resume`))))
	shot(t, ctx, "destination")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#resume`)),
		chromedp.WaitVisible(chromedp.CSS(`#pause`)),
	))
	b.waitSourcesDrained(t, "notes")
	require.Len(t, byID(s.dest.fake), 13)

	// A replay by key range, counted first.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(s.base+"/console/sources/notes"),
		chromedp.Click(chromedp.CSS(`#replay-link`)),
		chromedp.WaitVisible(chromedp.CSS(`#replay-form`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=from]`), "2"),
		chromedp.SendKeys(chromedp.CSS(`input[name=to]`), "11"),
		chromedp.Click(chromedp.CSS(`#dry-run`)),
		chromedp.WaitVisible(chromedp.CSS(`#count`)),
	))
	require.Contains(t, textOf(t, ctx, `#count`), "counts 4 keys")
	shot(t, ctx, "replay")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#start-replay`)),
		chromedp.WaitVisible(chromedp.CSS(`#flash`)),
	))
	require.Contains(t, textOf(t, ctx, `#flash`), "4 keys of source notes")
	waitFor(t, 60*time.Second, "the replay's keys arrive again", func() bool {
		got := byID(s.dest.fake)
		return len(got["2"]) == 2 && len(got["3"]) == 2 && len(got["10"]) == 2 && len(got["11"]) == 2
	})
	require.Len(t, byID(s.dest.fake)["12"], 1, "a key outside the range is not sent again")
	requireOnceInOrder(t, s.dest.fake)

	// The token fixed at the receiver, a probe now: no waiting for the
	// next probe interval, and the page says the probe's answer.
	hooks.fake.SetConfig(fakethirdparty.Config{Token: "a-stale-token"})
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(s.base+"/console/destinations/hooks"),
		chromedp.Click(chromedp.CSS(`#probe`)),
		chromedp.WaitVisible(chromedp.CSS(`#flash`)),
	))
	require.Regexp(t, `destination hooks: probe accepted at \S+: the destination takes requests again`, textOf(t, ctx, `#flash`))
	waitFor(t, 20*time.Second, "the probe's row arrives", func() bool { return len(byID(hooks.fake)["1"]) == 1 })
	waitFor(t, 10*time.Second, "the last error cleared once requests succeed", func() bool {
		for _, d := range b.report(t).Destinations {
			if d.Name == "hooks" {
				return d.LastError == nil && !d.Credentials.Refused
			}
		}
		return false
	})
	waitFor(t, 10*time.Second, "the console says ok", func() bool {
		require.NoError(t, chromedp.Do(ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`#credentials`))))
		return strings.TrimSpace(textOf(t, ctx, `#credentials`)) == "ok"
	})
}

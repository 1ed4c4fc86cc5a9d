package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// The console row (issue 30): the drain of a source with the console open
// and refreshing (its overview, the source's page and the destination's
// page, each read once a second with the token, five times as often as a
// page reloads itself) against the same drain without anybody looking,
// alternated in the same run. Target >= 0.95x.

// consoleToken is the console's token in the bench's daemons.
const consoleToken = "bench-console-token"

// consoleEvery is how often the bench's reader reads each page.
const consoleEvery = time.Second

// readConsole reads the console's pages until ctx ends and counts those
// read.
func readConsole(ctx context.Context, addr string, pages *atomic.Int64) {
	client := &http.Client{Timeout: 10 * time.Second}
	t := time.NewTicker(consoleEvery)
	defer t.Stop()
	for {
		for _, p := range []string{"/console", "/console/sources/orders", "/console/destinations/api_orders"} {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+p, nil)
			if err != nil {
				return
			}
			req.Header.Set("Authorization", "Bearer "+consoleToken)
			res, err := client.Do(req)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				continue
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				pages.Add(1)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (r *runner) consoleScenario(ctx context.Context) ([]Row, error) {
	// Three times the source drain's rows: a drain of a second would see
	// two or three reads of the console.
	n := 3 * r.sourceSizes().drainRows
	var pages atomic.Int64
	var watched time.Duration
	without, with, err := r.alternate(func(i int) (float64, error) {
		r.progressf("   drain %d/%d without the console", i+1, r.sizes.DrainRepeats)
		run, err := r.runSources(ctx, "console-off", []string{"orders"}, n, 0, 0)
		return float64(n) / run.took.Seconds(), err
	}, func(i int) (float64, error) {
		r.progressf("   drain %d/%d with the console open and refreshing", i+1, r.sizes.DrainRepeats)
		run, err := r.runSourcesWith(ctx, "console-on", []string{"orders"}, n, 0, 0, benchFormat{}, sourceRunExtra{
			settings: []string{"SYNCER_CONSOLE_TOKEN=" + consoleToken},
			beside:   func(ctx context.Context, addr string) { readConsole(ctx, addr, &pages) },
		})
		watched += run.took
		return float64(n) / run.took.Seconds(), err
	})
	if err != nil {
		return nil, err
	}
	if pages.Load() == 0 {
		return nil, fmt.Errorf("bench: console: no page of the console was read during the drains")
	}
	ratio := with / without
	return []Row{{
		Scenario: "console",
		Measured: fmt.Sprintf("%s rows/s with the console open (%d pages read, 3 a second; %s rows, median of %d)", count(with), pages.Load(), count(float64(n)), r.sizes.DrainRepeats),
		Baseline: fmt.Sprintf("%s rows/s without (median of %d)", count(without), r.sizes.DrainRepeats),
		Figure:   fmt.Sprintf("%.2fx", ratio),
		Target:   ">= 0.95x",
		Pass:     ratio >= 0.95,
		Values:   map[string]float64{"rows": float64(n), "rows_per_s": with, "without_rows_per_s": without, "ratio": ratio, "pages": float64(pages.Load()), "watched_s": watched.Seconds()},
	}}, nil
}

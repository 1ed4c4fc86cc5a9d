package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// An own-limits timeline tells a late request from a stop: a tenant at
// 10/s sending every 110 ms but once 500 ms apart lost 10 ms 8 times and
// 400 ms once; its lane, of it alone, was silent at each gap of 100 ms
// or more.
func TestOwnTimelineTellsLateFromStops(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	var ok []time.Time
	at := start
	for i := range 10 {
		ok = append(ok, at)
		if i == 4 {
			at = at.Add(500 * time.Millisecond)
		} else {
			at = at.Add(110 * time.Millisecond)
		}
	}
	tl := ownTimeline{name: "t2", limit: 10, lane: 3, ok: ok, inWindow: 10, ratio: 0.8, first: ok[0], last: ok[len(ok)-1]}
	got := tl.gapsText(start, start, at)
	require.Contains(t, got, "8 late by 80ms in all, 1 stops of 400ms in all")
	require.Contains(t, got, "longest 500ms at 0.44s")
	lines := ownTimelinesText([]ownTimeline{tl}, 4, start, start, at, 4)
	require.Len(t, lines, 3)
	require.True(t, strings.HasPrefix(lines[1], "lanes (tenants, asked, slowest): 3: 1 at 10/s min 0.80x"), lines[1])
	require.Contains(t, lines[2], "lane 3 silent (nothing sent for 100ms or more) 9 times")
}

package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/syncer-dev/syncer/internal/history"
	"github.com/syncer-dev/syncer/internal/rows"
)

// HistoryCmd prints a key's story: every exported version, each request
// that carried it and how it was settled (internal/history).
type HistoryCmd struct {
	DB
	Source string `name:"source" placeholder:"NAME" default:"resources" help:"The configured source NAME, or resources (the default)."`
	Key    string `name:"key" required:"" placeholder:"K" help:"The key in its text form as status shows it: a row id of resources, a source's key (a composite key is one JSON array)."`
	Limit  int    `name:"limit" placeholder:"N" help:"Read at most the newest N entries (default 1000)."`
	JSON   bool   `name:"json" help:"Print one JSON object instead of text."`
}

// Validate checks the key of resources is a row id.
func (c *HistoryCmd) Validate() error {
	if err := c.DB.Validate(); err != nil {
		return err
	}
	if c.Limit < 0 {
		return usagef("--limit must not be negative")
	}
	if rows.KindOf(c.Source) == rows.Resources {
		if _, err := strconv.ParseInt(c.Key, 10, 64); err != nil {
			return usagef("--key of resources is a row id (an integer), got %q", c.Key)
		}
	}
	return nil
}

// Run reads the story and prints it.
func (c *HistoryCmd) Run(ctx context.Context, env *Env) error {
	pool, err := c.openMigrated(ctx, "syncer history")
	if err != nil {
		return err
	}
	defer pool.Close()
	key := c.Key
	if rows.KindOf(c.Source) == rows.Configured {
		// A configured source's key in its recorded form (a uuid in
		// lower case, a composite key's compact JSON array).
		src, err := openRows(ctx, pool, rows.Scope{Source: c.Source})
		if err != nil {
			return err
		}
		rc := RetryFailedCmd{Key: []string{c.Key}}
		keys, err := rc.normalizedKeys(src)
		if err != nil {
			return err
		}
		key = keys[0]
	}
	st, err := history.Lookup(ctx, pool, c.Source, key, c.Limit)
	if err != nil {
		return err
	}
	if c.JSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	writeStory(env.Stdout, st)
	return nil
}

// writeStory prints st as text: a line per version, a line per entry.
func writeStory(w io.Writer, st history.Story) {
	if len(st.Versions) == 0 {
		fmt.Fprintf(w, "%s key %s: no history (nothing exported within the retention, or the key is mistyped)\n", st.Feed, st.Key)
		return
	}
	fmt.Fprintf(w, "%s key %s: %s\n", st.Feed, st.Key, count(int64(len(st.Versions)), "version", "versions"))
	if st.Truncated {
		fmt.Fprintln(w, "(older entries left out: raise --limit)")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, v := range st.Versions {
		what := ""
		if v.Deleted {
			what = " (delete)"
		}
		captured := ""
		if v.Captured != nil {
			captured = ", captured " + v.Captured.UTC().Format(time.RFC3339Nano)
		}
		fmt.Fprintf(tw, "version %d%s: %s%s\n", v.Version, what, v.Settled, captured)
		for _, e := range v.Entries {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", e.At.UTC().Format(time.RFC3339Nano), e.Outcome,
				dash(e.Destination), statusText(e), latencyText(e), dash(e.BatchKey))
			if e.Reason != "" {
				fmt.Fprintf(tw, "    reason: %s\n", strings.ReplaceAll(e.Reason, "\n", " "))
			}
		}
	}
	tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func statusText(e history.Entry) string {
	switch {
	case e.Status == nil:
		return "-"
	case *e.Status == 0:
		return "no answer"
	}
	return "HTTP " + strconv.Itoa(*e.Status)
}

func latencyText(e history.Entry) string {
	if e.LatencyMS == nil {
		return "-"
	}
	return strconv.Itoa(*e.LatencyMS) + " ms"
}

package console

import (
	"cmp"
	"errors"
	"net/http"
	"strconv"
	"strings"

	rowhistory "github.com/syncer-dev/syncer/internal/history"
	"github.com/syncer-dev/syncer/internal/sources"
	"github.com/syncer-dev/syncer/internal/status"
)

// storyData is the key search page's data: the form and, once a key is
// asked for, its story as `syncer history` prints it.
type storyData struct {
	Sources     []string
	Source, Key string
	// Message says why nothing is shown (a key that is not one of the
	// source's, an unknown source, no history).
	Message string
	Story   *rowhistory.Story
	// Versions are Story's, as the page shows them.
	Versions []storyVersion
}

// storyVersion is a version of a key as the page shows it.
type storyVersion struct {
	Version            int64
	Deleted            bool
	Settled, BatchedAt string
	Captured           string
	Entries            []storyEntry
}

// storyEntry is an entry as the page shows it.
type storyEntry struct {
	At, Outcome, Destination, Status, Latency, Key, Reason string
}

func storyVersions(st *rowhistory.Story) []storyVersion {
	out := make([]storyVersion, 0, len(st.Versions))
	for _, v := range st.Versions {
		sv := storyVersion{Version: v.Version, Deleted: v.Deleted, Settled: v.Settled}
		if v.Captured != nil {
			sv.Captured = v.Captured.UTC().Format("2006-01-02 15:04:05.000")
		}
		for _, e := range v.Entries {
			if sv.BatchedAt == "" && e.BatchedAt != nil {
				sv.BatchedAt = e.BatchedAt.UTC().Format("2006-01-02 15:04:05")
			}
			se := storyEntry{At: e.At.UTC().Format("2006-01-02 15:04:05.000"), Outcome: e.Outcome, Destination: cmp.Or(e.Destination, "—"),
				Status: "—", Latency: "—", Key: cmp.Or(e.BatchKey, "—"), Reason: e.Reason}
			switch {
			case e.Status == nil:
			case *e.Status == 0:
				se.Status = "no answer"
			default:
				se.Status = strconv.Itoa(*e.Status)
			}
			if e.LatencyMS != nil {
				se.Latency = strconv.Itoa(*e.LatencyMS) + " ms"
			}
			sv.Entries = append(sv.Entries, se)
		}
		out = append(out, sv)
	}
	return out
}

// storyPage finds a key's story: GET /console/history?source=S&key=K.
// The failures and held keys link each key here.
func (c *Console) storyPage(w http.ResponseWriter, r *http.Request, cl caller) {
	ctx := r.Context()
	rep, err := c.reports.get(ctx, c.now())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	d := storyData{Source: r.URL.Query().Get("source"), Key: strings.TrimSpace(r.URL.Query().Get("key"))}
	d.Sources = sourceNames(rep)
	if d.Source == "" {
		d.Source = status.ResourcesSource
	}
	if d.Key != "" {
		key, msg, err := c.normalizeKey(r, d.Source, d.Key)
		switch {
		case err != nil:
			c.fail(w, r, err)
			return
		case msg != "":
			d.Message = msg
		default:
			st, err := rowhistory.Lookup(ctx, c.pool, d.Source, key, 0)
			if err != nil {
				c.fail(w, r, err)
				return
			}
			d.Story, d.Versions = &st, storyVersions(&st)
			if len(st.Versions) == 0 {
				d.Message = "No history of key " + key + " of " + d.Source + ": nothing exported within the retention, or the key is mistyped."
			}
		}
	}
	title := "Where is my row?"
	if d.Key != "" {
		title = "History of " + d.Source + " key " + d.Key
	}
	// A story does not refresh: it is read to be read.
	v := c.pageView(r, cl, title, d)
	v.Refresh = 0
	c.render(w, http.StatusOK, "story", v)
}

// sourceNames are the sources a key is searched in: resources first, even
// where no row of it was ever written.
func sourceNames(rep *status.Report) []string {
	names := []string{status.ResourcesSource}
	for _, s := range rep.Sources {
		if s.Name != status.ResourcesSource {
			names = append(names, s.Name)
		}
	}
	return names
}

// normalizeKey returns key in its text form as the source keeps it, or
// a message saying why it is not one of the source's keys.
func (c *Console) normalizeKey(r *http.Request, source, key string) (string, string, error) {
	if source == status.ResourcesSource {
		if _, err := strconv.ParseInt(key, 10, 64); err != nil {
			return "", "A key of resources is a row id (an integer).", nil
		}
		return key, "", nil
	}
	all, err := sources.Load(r.Context(), c.pool)
	if err != nil {
		return "", "", err
	}
	for _, s := range all {
		if s.Name != source {
			continue
		}
		n, err := s.NormalizeKey(key)
		if errors.Is(err, sources.ErrBadKey) {
			return "", "Not a key of source " + source + " (its key is " + s.KeyType + ").", nil
		}
		if err != nil {
			return "", "Not a key of source " + source + ": " + err.Error(), nil
		}
		return n, "", nil
	}
	return "", "No source " + source + " is installed.", nil
}

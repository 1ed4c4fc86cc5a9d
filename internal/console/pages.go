package console

import (
	"bytes"
	"cmp"
	"embed"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/syncer-dev/syncer/internal/status"
)

//go:embed templates
var files embed.FS

// pages are the parsed templates, one set per page.
type pages struct {
	css template.CSS
	set map[string]*template.Template
}

func parsePages() (*pages, error) {
	css, err := files.ReadFile("templates/console.css")
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	p := &pages{css: template.CSS(css), set: map[string]*template.Template{}} //nolint:gosec // our own file
	for _, name := range []string{"signin", "overview", "source", "replay", "destination", "story", "tenants"} {
		t, err := template.ParseFS(files, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", name, err)
		}
		p.set[name] = t
	}
	return p, nil
}

// view is what the layout shows around a page's data.
type view struct {
	Title   string
	Refresh int
	CSS     template.CSS
	Proof   string
	Flash   string
	Now     time.Time
	Data    any
}

// render writes a page, or a 500 (logged, not shown) when it fails.
func (c *Console) render(w http.ResponseWriter, code int, page string, v view) {
	v.CSS, v.Now = c.pages.css, c.now().UTC()
	var b bytes.Buffer
	if err := c.pages.set[page].ExecuteTemplate(&b, "layout", v); err != nil {
		c.cfg.Logger.Error("console: render", "page", page, "error", err.Error())
		http.Error(w, "500 the page could not be rendered; see the daemon's log", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(b.Bytes())
}

func (c *Console) renderSignIn(w http.ResponseWriter, code int, message, next string) {
	c.render(w, code, "signin", view{Title: "Sign in", Data: struct{ Message, Next string }{message, next}})
}

// fail answers an error of the database or of an action: logged, and said
// in a line that holds no secret (the token never reaches these errors).
func (c *Console) fail(w http.ResponseWriter, r *http.Request, err error) {
	c.cfg.Logger.WarnContext(r.Context(), "console: request failed", "path", r.URL.Path, "error", err.Error())
	http.Error(w, "500 "+err.Error(), http.StatusInternalServerError)
}

// pageView is the layout's view of a signed-in page that refreshes.
func (c *Console) pageView(r *http.Request, cl caller, title string, data any) view {
	return view{Title: title, Refresh: int(c.cfg.Refresh.Seconds()), Proof: cl.session.proof, Flash: r.URL.Query().Get("done"), Data: data}
}

// destRow is a destination as the console shows it.
type destRow struct {
	Name, Format, Breaker, Credentials, Paused, Rate, Accepted, LastError string
	Refused                                                               bool
	InFlight                                                              int
	Sources                                                               []string
	// InFlightNote says what InFlight means while paused by a person.
	InFlightNote string
}

func (c *Console) destRow(d status.Destination) destRow {
	row := destRow{Name: d.Name, Format: c.cfg.Formats[d.Name], Breaker: d.Breaker.State, InFlight: d.InFlight, InFlightNote: d.InFlightNote, Sources: d.Sources, Credentials: "ok"}
	if row.Format == "" {
		row.Format = "—"
	}
	if !d.Breaker.Until.IsZero() {
		row.Breaker += " until " + d.Breaker.Until.UTC().Format(time.TimeOnly)
	}
	switch {
	case d.Credentials.Refused:
		row.Refused, row.Credentials = true, fmt.Sprintf("REFUSED since %s: %s", d.Credentials.Since.UTC().Format(time.DateTime), d.Credentials.Message)
		if d.Credentials.TokenEndpoint != "" {
			row.Credentials = fmt.Sprintf("REFUSED by the token endpoint %s since %s: %s", d.Credentials.TokenEndpoint, d.Credentials.Since.UTC().Format(time.DateTime), d.Credentials.Message)
		}
	case d.Configuration.Refused:
		row.Refused, row.Credentials = true, fmt.Sprintf("URL REFUSED since %s: %s", d.Configuration.Since.UTC().Format(time.DateTime), d.Configuration.Message)
	}
	switch {
	case d.Paused != nil:
		row.Paused = fmt.Sprintf("PAUSED by %s since %s", d.Paused.By, d.Paused.Since.UTC().Format(time.DateTime))
	case d.Pause != nil:
		row.Paused = fmt.Sprintf("the third party asked until %s: %s", d.Pause.Until.UTC().Format(time.TimeOnly), d.Pause.Cause)
	}
	if d.Rate != nil {
		row.Rate = fmt.Sprintf("%.1f requests/s", d.Rate.Limit)
	}
	if a := c.history.acceptedRate(d.Name); a >= 0 {
		row.Accepted = strconv.FormatFloat(a, 'f', 1, 64)
	} else {
		row.Accepted = "—"
	}
	if d.LastError != nil {
		row.LastError = d.LastError.At.UTC().Format(time.DateTime) + ": " + d.LastError.Text
	}
	return row
}

// sourceRow is a source (or resources) as the console shows it.
type sourceRow struct {
	Name, Table, Destination, Oldest, Snapshot, Stopped string
	Pending, Failed                                     int64
	// Verified is its last verify in short (time and counts, or that one
	// runs); Drift is set when the last finished run found drift.
	Verified string
	Drift    bool
}

func sourceRowOf(s status.Source) sourceRow {
	snap := cmp.Or(s.Snapshot, "—")
	if s.Snapshot == "running" && s.SnapshotPercent >= 0 {
		snap += fmt.Sprintf(" (%.1f%%)", s.SnapshotPercent)
	}
	row := sourceRow{Name: s.Name, Table: s.Table, Destination: s.Destination, Pending: s.Pending, Failed: s.Failed,
		Oldest: ageText(s.OldestPendingAgeSeconds), Snapshot: snap, Stopped: s.Stopped}
	row.Verified, row.Drift = verifiedText(s.Verify)
	return row
}

func ageText(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Second).String()
}

// overviewData is the overview's data.
type overviewData struct {
	Destinations []destRow
	Sources      []sourceRow
	Failures     []status.Failure
	Held         []status.HeldKey
	Replays      []status.Replay
	Proof        string
	// Find is the key search form (story.go).
	Find storyData
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request, cl caller) {
	rep, err := c.reports.get(r.Context(), c.now())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	d := overviewData{Failures: rep.RecentFailures[:min(len(rep.RecentFailures), status.RecentFailuresDefault)], Held: rep.HeldKeys,
		Replays: rep.Replays, Proof: cl.session.proof}
	for _, x := range rep.Destinations {
		d.Destinations = append(d.Destinations, c.destRow(x))
	}
	d.Find.Source, d.Find.Sources = status.ResourcesSource, sourceNames(rep)
	for _, s := range rep.Sources {
		d.Sources = append(d.Sources, sourceRowOf(s))
	}
	c.render(w, http.StatusOK, "overview", c.pageView(r, cl, "Overview", d))
}

// sourceData is a source page's data.
type sourceData struct {
	Source    sourceRow
	Failures  []status.Failure
	Held      []status.HeldKey
	Replays   []status.Replay
	Retryable bool
	Proof     string
	// Tenants are a source with a tenant column's, for its summary line.
	Tenants *status.Tenants
	// Verified are its tenants' last verifies (verify.go).
	Verified      []tenantVerified
	VerifiedOther int
}

func (c *Console) sourcePage(w http.ResponseWriter, r *http.Request, cl caller) {
	name := r.PathValue("name")
	rep, err := c.reports.get(r.Context(), c.now())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	d := sourceData{Proof: cl.session.proof}
	i := slices.IndexFunc(rep.Sources, func(s status.Source) bool { return s.Name == name })
	if i < 0 {
		http.NotFound(w, r)
		return
	}
	// Every source, resources included, is retried and replayed alike
	// (operator, replays).
	d.Source, d.Retryable = sourceRowOf(rep.Sources[i]), true
	d.Tenants = rep.Sources[i].Tenants
	d.Verified, d.VerifiedOther = tenantsVerified(rep.Sources[i].VerifyTenants)
	for _, f := range rep.RecentFailures {
		if f.Source == name {
			d.Failures = append(d.Failures, f)
		}
	}
	for _, h := range rep.HeldKeys {
		if h.Source == name {
			d.Held = append(d.Held, h)
		}
	}
	for _, rp := range rep.Replays {
		if rp.Source == name || (name == status.ResourcesSource && rp.Source == "") {
			d.Replays = append(d.Replays, rp)
		}
	}
	c.render(w, http.StatusOK, "source", c.pageView(r, cl, "Source "+name, d))
}

// destinationData is a destination page's data.
type destinationData struct {
	Destination destRow
	Chart       template.HTML
}

func (c *Console) destinationPage(w http.ResponseWriter, r *http.Request, cl caller) {
	name := r.PathValue("name")
	rep, err := c.reports.get(r.Context(), c.now())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	i := slices.IndexFunc(rep.Destinations, func(d status.Destination) bool { return d.Name == name })
	if i < 0 {
		http.NotFound(w, r)
		return
	}
	d := destinationData{Destination: c.destRow(rep.Destinations[i]), Chart: c.history.chart(name, c.now())}
	c.render(w, http.StatusOK, "destination", c.pageView(r, cl, "Destination "+name, d))
}

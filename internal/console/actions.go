package console

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/operator"
	"github.com/syncer-dev/syncer/internal/replays"
	"github.com/syncer-dev/syncer/internal/rows"
)

// done sends the browser back to a page with a line saying what was done
// (a script gets the line itself).
func (c *Console) done(w http.ResponseWriter, r *http.Request, cl caller, page, msg string) {
	c.reports.forget()
	if cl.bearer {
		_, _ = fmt.Fprintln(w, msg)
		return
	}
	sep := "?"
	if strings.Contains(page, "?") {
		sep = "&" // a page with a query of its own (a tenant's)
	}
	http.Redirect(w, r, page+sep+"done="+url.QueryEscape(msg), http.StatusSeeOther)
}

// answer ends an action as its error says: 400 for what the request got
// wrong (an unknown name, a key that is not one of the source's), 500 for
// a failure, else done with msg.
func (c *Console) answer(w http.ResponseWriter, r *http.Request, cl caller, err error, page, msg string) {
	switch {
	case errors.Is(err, operator.ErrUnknown), errors.Is(err, replays.ErrBadRange):
		refuse(w, err)
	case err != nil:
		c.fail(w, r, err)
	default:
		c.done(w, r, cl, page, msg)
	}
}

// refuse answers an action the request got wrong (an unknown name, a bad
// key) with 400 and the reason.
func refuse(w http.ResponseWriter, err error) {
	http.Error(w, "400 "+err.Error(), http.StatusBadRequest)
}

func (c *Console) retry(w http.ResponseWriter, r *http.Request, cl caller) {
	name := r.PathValue("name")
	keys := r.PostForm["key"]
	n, err := operator.Retry(r.Context(), c.pool, rows.Scope{Source: name}, keys)
	msg := fmt.Sprintf("%s of source %s %s eligible again", count(n, "failed key"), name, verb(n, "is", "are"))
	if err == nil {
		// As retry-failed: a held key named (or every one) goes now.
		var held int64
		if held, err = operator.ReleaseHeld(r.Context(), c.pool, name, keys); held > 0 {
			msg += fmt.Sprintf("; %s %s again now", count(held, "held key"), verb(held, "goes", "go"))
		}
	}
	c.answer(w, r, cl, err, Prefix+"/sources/"+url.PathEscape(name), msg)
}

// replayData is the dry run's page.
type replayData struct {
	// Unit is what the count counts: rows of resources, keys of a
	// configured source (rows.ReplayUnit).
	Source, From, To, Error, Unit string
	Counted                       bool
	Count                         int64
}

// replayDryRun shows the replay's form and, once a range is given, counts
// its keys: nothing is recorded. The page does not refresh itself, so the
// count stays the one the person confirms.
func (c *Console) replayDryRun(w http.ResponseWriter, r *http.Request, cl caller) {
	name, q := r.PathValue("name"), r.URL.Query()
	d := replayData{Source: name, From: q.Get("from"), To: q.Get("to"), Counted: q.Get("count") != "", Unit: rows.ReplayUnit(name)}
	code := http.StatusOK
	var plan *replays.Plan
	var err error
	if d.Counted {
		// The form alone counts nothing: a whole table's count waits for
		// the person's range. The plan is the command line's too.
		plan, err = operator.PlanReplay(r.Context(), c.pool, operator.KeyRange(name, d.From, d.To))
	}
	switch {
	case errors.Is(err, operator.ErrUnknown):
		http.NotFound(w, r)
		return
	case !d.Counted:
	case err != nil:
		d.Error, code = err.Error(), http.StatusBadRequest
	default:
		d.Count = plan.Count
	}
	v := c.pageView(r, cl, "Replay of "+name, d)
	v.Refresh = 0 // the count stays as read until confirmed
	c.render(w, code, "replay", v)
}

// replayStart starts the replay the dry run counted.
func (c *Console) replayStart(w http.ResponseWriter, r *http.Request, cl caller) {
	name := r.PathValue("name")
	plan, err := operator.PlanReplay(r.Context(), c.pool, operator.KeyRange(name, r.PostFormValue("from"), r.PostFormValue("to")))
	if err != nil {
		refuse(w, err)
		return
	}
	id, err := plan.Start(r.Context(), c.pool)
	if err != nil {
		refuse(w, err)
		return
	}
	c.done(w, r, cl, Prefix+"/sources/"+url.PathEscape(name), fmt.Sprintf("replay %d started: %d %s of source %s", id, plan.Count, plan.Unit(), name))
}

func (c *Console) replayCancel(w http.ResponseWriter, r *http.Request, cl caller) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		refuse(w, fmt.Errorf("replay id %q: not a number", r.PathValue("id")))
		return
	}
	if err := operator.CancelReplay(r.Context(), c.pool, id); err != nil {
		refuse(w, err)
		return
	}
	back := r.Referer()
	if u, err := url.Parse(back); err != nil || u.Path == "" {
		back = Prefix
	} else {
		back = localPath(u.Path)
	}
	c.done(w, r, cl, back, fmt.Sprintf("replay %d cancelled: nothing more of it is sent", id))
}

func (c *Console) destinationAction(w http.ResponseWriter, r *http.Request, cl caller) {
	name, action := r.PathValue("name"), r.PathValue("action")
	var err error
	var msg string
	switch action {
	case "pause":
		err, msg = operator.Pause(r.Context(), c.pool, name, operator.ByConsole, 0), "destination %s paused: every running daemon holds the pause; nothing more is sent, pending rows are kept"
	case "resume":
		err, msg = operator.Resume(r.Context(), c.pool, name, operator.ByConsole, 0), "destination %s resumed"
	case "probe":
		c.probe(w, r, cl, name)
		return
	default:
		http.NotFound(w, r)
		return
	}
	c.answer(w, r, cl, err, Prefix+"/destinations/"+url.PathEscape(name), fmt.Sprintf(msg, name))
}

// probe asks the daemons to probe the held destination now and waits, up
// to ProbeWait, for the answer, which the page shows: as `syncer probe`
// does, so that a person who fixed a token learns at once whether the
// fix took, not at the next look at the page.
func (c *Console) probe(w http.ResponseWriter, r *http.Request, cl caller, name string) {
	page := Prefix + "/destinations/" + url.PathEscape(name)
	p, held, err := operator.AskProbe(r.Context(), c.pool, name, operator.ByConsole)
	if err != nil || !held {
		c.answer(w, r, cl, err, page, fmt.Sprintf("destination %s: nothing to probe: neither its credentials nor its URL are refused", name))
		return
	}
	wctx, cancel := context.WithTimeout(r.Context(), c.cfg.ProbeWait)
	defer cancel()
	a, err := operator.WaitProbeAnswer(wctx, c.pool, name, p)
	switch {
	case err != nil && r.Context().Err() == nil && wctx.Err() != nil:
		c.done(w, r, cl, page, fmt.Sprintf("destination %s: probe asked; no daemon answered within %s: is a daemon running with this destination, with rows pending for it, and not paused?", name, c.cfg.ProbeWait))
	case err != nil:
		c.fail(w, r, err)
	default:
		c.done(w, r, cl, page, probeAnswerText(name, a))
	}
}

// probeAnswerText says what a probe's answer was, in the words of `syncer
// probe`.
func probeAnswerText(name string, a breakerstore.ProbeAnswer) string {
	if a.Accepted && !a.Held {
		return fmt.Sprintf("destination %s: probe accepted at %s: the destination takes requests again", name, a.At.Format(time.RFC3339))
	}
	status := ""
	if a.Status != 0 {
		status = fmt.Sprintf(" with status %d", a.Status)
	}
	return fmt.Sprintf("destination %s: probe answered%s at %s, still held: %s", name, status, a.At.Format(time.RFC3339), cmp.Or(a.Text, "a refusal stands"))
}

// count says n things in English: "1 failed key", "2 failed keys",
// "0 failed keys".
func count(n int64, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// verb is the verb agreeing with n things.
func verb(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

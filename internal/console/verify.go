package console

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/syncer-dev/syncer/internal/operator"
	"github.com/syncer-dev/syncer/internal/status"
	"github.com/syncer-dev/syncer/internal/verify"
)

// verifiedText is a source's last verify as the "last verified" column
// shows it: when the last run finished and its counts by kind, and
// whether one runs or was asked for; drift says the last run found some.
func verifiedText(l *verify.Last) (text string, drift bool) {
	if l == nil {
		return "never", false
	}
	text = "no run finished"
	if c := l.Counts; c != nil {
		when := "?"
		if l.FinishedAt != nil {
			when = l.FinishedAt.UTC().Format(time.DateTime)
		}
		text = fmt.Sprintf("%s: %d checked, %d missing, %d stale, %d zombie, %d failed, %d unknown", when, c.Checked, c.Missing, c.Stale, c.Zombie, c.Failed, c.Unknown)
		drift = c.Drifted() > 0
	}
	switch {
	case l.State == verify.StateRunning:
		text += " (a run is under way)"
	case l.State == verify.StateFailed:
		text += " (the last run failed: " + l.Error + ")"
	case l.State == verify.StateInterrupted:
		text += " (a run was interrupted; it resumes)"
	case l.Requested():
		text += " (asked for; a daemon starts it within seconds)"
	}
	return text, drift
}

// tenantVerified is a tenant's last verify as the source page lists it.
type tenantVerified struct {
	Tenant, Verified string
	Drift            bool
}

// tenantsVerified lists the tenants' last verifies, those that drifted
// first, at most tenantsShown; other is how many more there are (status
// --json lists them all).
func tenantsVerified(all []status.TenantVerify) (shown []tenantVerified, other int) {
	out := make([]tenantVerified, len(all))
	for i, t := range all {
		out[i].Tenant = t.Tenant
		out[i].Verified, out[i].Drift = verifiedText(t.Last)
	}
	slices.SortStableFunc(out, func(a, b tenantVerified) int {
		switch {
		case a.Drift && !b.Drift:
			return -1
		case b.Drift && !a.Drift:
			return 1
		}
		return 0
	})
	if len(out) > tenantsShown {
		return out[:tenantsShown], len(out) - tenantsShown
	}
	return out, 0
}

// verifyNow asks the daemons to verify the source now.
func (c *Console) verifyNow(w http.ResponseWriter, r *http.Request, cl caller) {
	name := r.PathValue("name")
	err := operator.VerifyNow(r.Context(), c.pool, name)
	c.answer(w, r, cl, err, Prefix+"/sources/"+url.PathEscape(name),
		fmt.Sprintf("source %s: a verify was asked for; a running daemon starts it within seconds (see last verified)", name))
}

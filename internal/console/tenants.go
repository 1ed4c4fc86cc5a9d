package console

// The tenants view of a source with a tenant column (docs/protocol.md
// section 10, "Seen and acted on"): its tenants by state and pending rows,
// one found by its value, and a pause, resume or probe of one tenant,
// through internal/operator as the command line's --tenant.

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/operator"
	"github.com/syncer-dev/syncer/internal/sources"
	"github.com/syncer-dev/syncer/internal/status"
	"github.com/syncer-dev/syncer/internal/tenant"
)

// tenantsShown is how many tenants the view lists.
const tenantsShown = 50

type tenantsData struct {
	Source, Destination, Search, Heading string
	States                               []stateCount
	UnconnectedPending                   int
	Tenants                              []tenantRow
}

type stateCount struct {
	Name  string
	Count int
	Bad   bool
}

type tenantRow struct {
	status.Tenant
	// Name is the tenant's value (Tenant is the embedded struct's name in
	// a template).
	Name   string
	Oldest string
}

// tenantSource returns the destination of source name when it has a
// tenant column; ok is false otherwise.
func (c *Console) tenantSource(r *http.Request, name string) (dest string, ok bool, err error) {
	withTenant, err := sources.TenantSources(r.Context(), c.pool)
	if err != nil {
		return "", false, err
	}
	if _, ok := withTenant[name]; !ok {
		return "", false, nil
	}
	rep, err := c.reports.get(r.Context(), c.now())
	if err != nil {
		return "", false, err
	}
	i := slices.IndexFunc(rep.Sources, func(s status.Source) bool { return s.Name == name })
	if i < 0 {
		return "", false, nil
	}
	return rep.Sources[i].Destination, true, nil
}

func (c *Console) tenantsPage(w http.ResponseWriter, r *http.Request, cl caller) {
	name, q := r.PathValue("name"), r.URL.Query()
	dest, ok, err := c.tenantSource(r, name)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if !ok {
		http.NotFound(w, r)
		return
	}
	state := q.Get("state")
	if state != "" && !slices.Contains(breakerstore.TenantStates, state) {
		refuse(w, fmt.Errorf("state %q: not one of %v", state, breakerstore.TenantStates))
		return
	}
	ts, err := status.ReadTenantsIn(r.Context(), c.pool, name, dest, tenantsShown, state)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	d := tenantsData{Source: name, Destination: dest, Search: q.Get("tenant"), UnconnectedPending: ts.UnconnectedPending}
	for _, s := range breakerstore.TenantStates {
		d.States = append(d.States, stateCount{Name: s, Count: ts.Counts[s], Bad: s == breakerstore.TenantRefused || s == breakerstore.TenantUnconnected || s == breakerstore.TenantError || s == breakerstore.TenantInvalid})
	}
	list := ts.Top
	switch {
	case d.Search != "":
		one, err := status.ReadTenant(r.Context(), c.pool, name, dest, tenant.Tenant(d.Search))
		if err != nil {
			c.fail(w, r, err)
			return
		}
		list, d.Heading = []status.Tenant{one}, "Tenant "+d.Search
	case state != "":
		d.Heading = fmt.Sprintf("Tenants %s, most pending rows first", state)
	default:
		d.Heading = "Tenants with the most pending rows"
	}
	for _, t := range list {
		d.Tenants = append(d.Tenants, tenantRow{Tenant: t, Name: t.Tenant, Oldest: (time.Duration(t.OldestPendingSeconds * float64(time.Second))).Round(time.Second).String()})
	}
	c.render(w, http.StatusOK, "tenants", c.pageView(r, cl, "Tenants of "+name, d))
}

// tenantAction pauses, resumes or probes one tenant (form value tenant)
// of a source's destination.
func (c *Console) tenantAction(w http.ResponseWriter, r *http.Request, cl caller) {
	name, action, t := r.PathValue("name"), r.PathValue("action"), tenant.Tenant(r.PostFormValue("tenant"))
	dest, ok, err := c.tenantSource(r, name)
	switch {
	case err != nil:
		c.fail(w, r, err)
		return
	case !ok:
		http.NotFound(w, r)
		return
	case t.IsZero():
		refuse(w, errors.New("no tenant named"))
		return
	}
	var msg string
	switch action {
	case "pause":
		err, msg = operator.PauseTenant(r.Context(), c.pool, dest, t, operator.ByConsole, operator.TenantCheck{}), "tenant %s of destination %s paused: its rows wait, every other tenant's go"
	case "resume":
		err, msg = operator.ResumeTenant(r.Context(), c.pool, dest, t, operator.ByConsole, operator.TenantCheck{}), "tenant %s of destination %s resumed"
	case "probe":
		_, _, err = operator.ProbeTenant(r.Context(), c.pool, dest, t, operator.ByConsole, operator.TenantCheck{})
		msg = "tenant %s of destination %s: a probe was asked for; the daemons send it within seconds if it is held"
	default:
		http.NotFound(w, r)
		return
	}
	back := Prefix + "/sources/" + url.PathEscape(name) + "/tenants?tenant=" + url.QueryEscape(t.String())
	c.answer(w, r, cl, err, back, fmt.Sprintf(msg, t, dest))
}

package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/status"
	"github.com/syncer-dev/syncer/internal/tenant"
)

// StatusCmd is `syncer status`.
type StatusCmd struct {
	DB
	JSON   bool          `name:"json" help:"Print one JSON object instead of a table."`
	Source string        `name:"source" help:"With --tenant: the source with a tenant column whose tenant to show."`
	Tenant tenant.Tenant `name:"tenant" help:"Show one tenant of --source: its pending and failed rows and its state."`
}

// Validate checks that --tenant comes with --source.
func (c *StatusCmd) Validate() error {
	if (c.Tenant == "") != (c.Source == "") {
		return fmt.Errorf("syncer status: --source and --tenant go together")
	}
	return nil
}

// Run prints the status.
func (c *StatusCmd) Run(ctx context.Context, env *Env) error {
	pool, err := c.openMigrated(ctx, "syncer status")
	if err != nil {
		return err
	}
	defer pool.Close()
	if c.Tenant != "" {
		return c.oneTenant(ctx, pool, env)
	}
	r, err := status.Gather(ctx, pool, nil)
	if err != nil {
		return err
	}
	if c.JSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	w := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	// What is exported comes first: the sources (resources among them,
	// last, while it is exported) and their destinations. The lines
	// after them are the contract's totals and resources' own, kept as
	// scripts read them.
	for _, src := range r.Sources {
		fmt.Fprintf(w, "source %s\t%s\n", src.Name, sourceLine(src))
		if src.Tenants != nil {
			fmt.Fprintf(w, "tenants of %s\t%s\n", src.Name, tenantsLine(src.Tenants))
			for _, t := range src.Tenants.Top {
				fmt.Fprintf(w, "  tenant %s\t%s\n", t.Tenant, tenantLine(t))
			}
			if p := src.Tenants.Paused; len(p) > 0 {
				fmt.Fprintf(w, "  paused tenants\t%s (syncer resume --destination %s --tenant T)\n", strings.Join(p, ", "), src.Destination)
			}
		}
	}
	for _, d := range r.Destinations {
		fmt.Fprintf(w, "destination %s\t%s\n", d.Name, destinationLine(d, tenantsRefused(r, d.Name)))
	}
	for _, s := range r.Sessions {
		fmt.Fprintf(w, "sessions of %s on %s, process %d\t%d server sessions (%d active), %d advisory locks\n",
			s.Role, s.Host, s.Process, s.Sessions, s.Active, s.Locks)
	}
	for _, src := range r.Sources {
		if src.Verify != nil {
			fmt.Fprintf(w, "verify %s\t%s\n", src.Name, src.Verify.Text())
		}
		for i, t := range src.VerifyTenants {
			if i == verifyTenantsShown {
				fmt.Fprintf(w, "  … and %d more tenants' verifies (status --json lists them all)\n", len(src.VerifyTenants)-i)
				break
			}
			fmt.Fprintf(w, "  verify %s tenant %s\t%s\n", src.Name, t.Tenant, t.Text())
		}
	}
	if r.ResourcesExported {
		fmt.Fprintf(w, "rows\t%d total, %d synced, %d unsynced (%d pending, %d failed)\n", r.Total, r.Synced, r.Unsynced, r.Pending, r.Failed)
		fmt.Fprintf(w, "oldest pending\t%s\n", seconds(r.OldestUnsyncedAgeSeconds))
		if r.SkippedUnchanged > 0 {
			fmt.Fprintf(w, "skipped unchanged\t%d versions: the body the third party last accepted, settled without a request\n", r.SkippedUnchanged)
		}
		fmt.Fprintf(w, "outbox pending\t%d\n", r.OutboxPending)
		fmt.Fprintf(w, "export lock\t%s\n", lockLine(r.Lock))
		b := r.Breaker.State
		if !r.Breaker.Until.IsZero() {
			b += " until " + r.Breaker.Until.Format(time.RFC3339)
		}
		fmt.Fprintf(w, "circuit breaker\t%s\n", b)
		if r.Credentials.Refused {
			fmt.Fprintf(w, "credentials\tREFUSED by the third party since %s: %s\n", r.Credentials.Since.Format(time.RFC3339), r.Credentials.Message)
		} else {
			fmt.Fprintf(w, "credentials\tok\n")
		}
		if r.Configuration.Refused {
			fmt.Fprintf(w, "third party URL\tREFUSED (a redirect, 404 or 410) since %s: %s\n", r.Configuration.Since.Format(time.RFC3339), r.Configuration.Message)
		}
		if r.Pause != nil {
			fmt.Fprintf(w, "paused\tuntil %s: %s\n", r.Pause.Until.Format(time.RFC3339), r.Pause.Cause)
		}
		if r.Rate != nil {
			fmt.Fprintf(w, "learnt rate\t%s\n", strings.TrimPrefix(rateText(*r.Rate), "learnt rate "))
		}
		if r.LastError != nil {
			fmt.Fprintf(w, "last error\t%s: %s\n", r.LastError.At.Format(time.RFC3339), r.LastError.Text)
		}
	} else {
		fmt.Fprintf(w, "outbox pending\t%d\n", r.OutboxPending)
	}
	for _, k := range r.JobNames() {
		fmt.Fprintf(w, "job %s\t%d\n", k, r.Jobs[k])
	}
	for _, cp := range r.Checkpoints {
		fmt.Fprintf(w, "checkpoint %s\tlast id %d, %d rows, %d failed, %d batches, updated %s\n",
			cp.Name, cp.LastID, cp.RowsDone, cp.RowsFailed, cp.BatchesDone, cp.UpdatedAt.Format(time.RFC3339))
	}
	for _, rp := range r.Replays {
		what := "rows"
		if rp.Source != "" {
			what = "keys of source " + rp.Source
		}
		if rp.Tenant != "" {
			what += " tenant " + rp.Tenant
		}
		fmt.Fprintf(w, "replay %d\t%s, %d of %d %s (%.1f%%), created %s\n",
			rp.ID, rp.State, rp.RowsDone, rp.TotalRows, what, rp.Percent, rp.CreatedAt.Format(time.RFC3339))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	// Keys come after the table, one line each and out of its columns: a
	// long key or reason would otherwise widen every line above it.
	if len(r.HeldKeys) > 0 {
		fmt.Fprintln(env.Stdout, "held:")
	}
	for _, h := range r.HeldKeys {
		what := "key " + h.ID + " of source " + h.Source
		if h.Source == status.ResourcesSource {
			what = "row " + h.ID
		}
		to := ""
		if h.Destination != "" {
			to = " to " + h.Destination
		}
		fmt.Fprintf(env.Stdout, "  held %s v%d: %s%s since %s, %d tries, next try %s: %s\n", what, h.Version, strings.ToUpper(h.State), to,
			h.Since.Format(time.RFC3339), h.Tries, h.NextTry.Format(time.RFC3339), cut(h.Reason))
	}
	if len(r.RecentFailures) > 0 {
		fmt.Fprintln(env.Stdout, "recent failures, latest first:")
	}
	for _, f := range r.RecentFailures {
		if f.Source == status.ResourcesSource {
			fmt.Fprintf(env.Stdout, "  failed row %s v%d: %s: %s\n", f.ID, f.Version, f.FailedAt.Format(time.RFC3339), cut(f.Error))
			continue
		}
		of := ""
		if f.Tenant != "" {
			of = " tenant " + f.Tenant
		}
		fmt.Fprintf(env.Stdout, "  failed key %s of source %s%s v%d: %s to %s: %s\n", f.ID, f.Source, of, f.Version,
			f.FailedAt.Format(time.RFC3339), f.Destination, cut(f.Error))
	}
	return nil
}

// reasonMax bounds a held key's or a failure's reason in the text
// output: a third party's answer can run to kilobytes, and one such line
// would bury the others. --json has it whole.
const reasonMax = 200

// cut shortens a reason to reasonMax runes, saying where the rest is.
func cut(s string) string {
	if utf8.RuneCountInString(s) <= reasonMax {
		return s
	}
	r := []rune(s)
	return string(r[:reasonMax]) + "… (cut; syncer status --json has it whole)"
}

func seconds(s float64) time.Duration {
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond)
}

// sourceLine is a source's state in one line: its work, then why it is
// stopped, if it is.
func sourceLine(src status.Source) string {
	line := fmt.Sprintf("%s to %s: %d pending, %d failed, oldest pending %s, %d batches in flight",
		src.Table, src.Destination, src.Pending, src.Failed, seconds(src.OldestPendingAgeSeconds), src.InFlight)
	if src.Snapshot != "" {
		line += ", snapshot " + src.Snapshot
	}
	if src.Snapshot == "running" && src.SnapshotPercent >= 0 {
		line += fmt.Sprintf(" (%.1f%%)", src.SnapshotPercent)
	}
	if src.Lock.Held {
		line += "; export lock " + lockLine(src.Lock)
	}
	if src.SkippedUnchanged > 0 {
		line += fmt.Sprintf(", %d skipped unchanged (no request)", src.SkippedUnchanged)
	}
	if src.Stopped != "" {
		line += "; STOPPED: " + src.Stopped
	}
	if src.Warning != "" {
		line += "; WARNING: " + src.Warning
	}
	return line
}

// refusedTenants is how many tenants of a destination have their
// credentials refused, and the source whose tenants line names them.
type refusedTenants struct {
	n      int
	source string
}

// tenantsRefused counts the refused tenants of destination dest, from
// its tenant sources' counts (each counts every tenant with facts at the
// destination, so the largest count is the destination's).
func tenantsRefused(r *status.Report, dest string) refusedTenants {
	var out refusedTenants
	for _, src := range r.Sources {
		if src.Destination == dest && src.Tenants != nil && src.Tenants.Counts[breakerstore.TenantRefused] > out.n {
			out = refusedTenants{n: src.Tenants.Counts[breakerstore.TenantRefused], source: src.Name}
		}
	}
	return out
}

// destinationLine is a destination's shared facts in one line; refused
// are its tenants whose credentials are refused, which its own
// "credentials ok" must not hide.
func destinationLine(d status.Destination, refused refusedTenants) string {
	parts := []string{"breaker " + d.Breaker.State}
	if !d.Breaker.Until.IsZero() {
		parts[0] += " until " + d.Breaker.Until.Format(time.RFC3339)
	}
	switch {
	case d.Credentials.Refused && d.Credentials.TokenEndpoint != "":
		parts = append(parts, fmt.Sprintf("credentials REFUSED by the token endpoint %s since %s: %s", d.Credentials.TokenEndpoint, d.Credentials.Since.Format(time.RFC3339), d.Credentials.Message))
	case d.Credentials.Refused:
		parts = append(parts, fmt.Sprintf("credentials REFUSED since %s: %s", d.Credentials.Since.Format(time.RFC3339), d.Credentials.Message))
	case refused.n > 0:
		parts = append(parts, fmt.Sprintf("credentials of %s REFUSED (see tenants of %s), the others ok",
			count(int64(refused.n), "tenant", "tenants"), refused.source))
	default:
		parts = append(parts, "credentials ok")
	}
	if d.Configuration.Refused {
		parts = append(parts, fmt.Sprintf("URL REFUSED (a redirect, 404 or 410) since %s: %s", d.Configuration.Since.Format(time.RFC3339), d.Configuration.Message))
	}
	if d.Paused != nil {
		parts = append(parts, fmt.Sprintf("PAUSED by %s since %s", d.Paused.By, d.Paused.Since.Format(time.RFC3339)))
	}
	if d.Pause != nil {
		parts = append(parts, fmt.Sprintf("paused until %s: %s", d.Pause.Until.Format(time.RFC3339), d.Pause.Cause))
	}
	if d.Rate != nil {
		parts = append(parts, rateText(*d.Rate))
	}
	if d.InFlightNote != "" {
		parts = append(parts, fmt.Sprintf("%d requests in flight (%s)", d.InFlight, d.InFlightNote))
	} else {
		parts = append(parts, fmt.Sprintf("%d requests in flight", d.InFlight))
	}
	if c := d.Certificate; c != nil {
		switch left := time.Until(c.NotAfter); {
		case left <= 0:
			parts = append(parts, fmt.Sprintf("CERTIFICATE EXPIRED: %s ended %s", c.What, c.NotAfter.Format(time.RFC3339)))
		case left < status.CertificateWarning:
			parts = append(parts, fmt.Sprintf("CERTIFICATE EXPIRES within 14 days: %s ends %s", c.What, c.NotAfter.Format(time.RFC3339)))
		}
	}
	if d.LastError != nil {
		parts = append(parts, fmt.Sprintf("last error %s: %s", d.LastError.At.Format(time.RFC3339), d.LastError.Text))
	}
	return strings.Join(parts, ", ")
}

// rateText says what was learnt of a destination's unannounced limit:
// in slow start there is no ceiling yet, only a rate that doubles.
func rateText(r breakerstore.Rate) string {
	switch {
	case r.Ceiling == 0:
		return fmt.Sprintf("learnt rate %.1f requests/s (slow start, no limit found yet)", r.Limit)
	default:
		return fmt.Sprintf("learnt rate %.1f requests/s (limit found near %.1f/s, probing past it)", r.Limit, r.Ceiling)
	}
}

// lockLine says who holds the export lock: the daemon's machine and
// process when syncer named the session, its backend otherwise.
func lockLine(l status.Lock) string {
	switch {
	case !l.Held:
		return "free"
	case l.PID == 0 && l.Host != "":
		// A lease alone (a transaction pooler, no SYNCER_DIRECT_URL):
		// no session holds it.
		return fmt.Sprintf("held by %s on %s, process %d (lease)", l.Role, l.Host, l.Process)
	case l.PID == 0:
		return fmt.Sprintf("held by lease (application_name %q)", l.ApplicationName)
	case l.Host != "":
		return fmt.Sprintf("held by %s on %s, process %d (backend pid %d)", l.Role, l.Host, l.Process, l.PID)
	default:
		return fmt.Sprintf("held by backend pid %d (application_name %q, client %s)", l.PID, l.ApplicationName, l.ClientAddr)
	}
}

// verifyTenantsShown is how many tenants' last verifies status prints
// under their source's.
const verifyTenantsShown = 20

package tenants

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/tenant"
)

// refresh reads e's row (when there is a query), waiting at most
// QueryWait for a slot of the gate, and applies it. A failure to read is
// returned and keeps what e had (a built deliverer goes on with the row
// it was built from); the next For reads again.
func (r *Registry) refresh(ctx context.Context, e *entry, now time.Time) error {
	if r.cfg.Settings == nil {
		return r.apply(ctx, e, now, nil, nil)
	}
	if err := r.cfg.Queries.wait(ctx, QueryWait); err != nil {
		return fmt.Errorf("destination %s: tenant %s: %w", r.cfg.Destination, e.tenant, err)
	}
	conn, err := r.read(ctx, e.tenant)
	r.cfg.Queries.release()
	return r.apply(ctx, e, now, conn, err)
}

// apply makes what a read of e's row gave (conn, or err; both nil without
// a query) e's state: its deliverer built or kept, or why its rows wait.
// A failure of the database rather than of the tenant's answer is
// returned and keeps what e had.
func (r *Registry) apply(ctx context.Context, e *entry, now time.Time, conn *connection, err error) error {
	var re *rowError
	var qe *QueryError
	switch {
	case errors.As(err, &re), errors.As(err, &qe) && !qe.Transient():
		// The tenant's own answer: its rows wait, whatever it had.
		e.readAt, e.failedAt = now, time.Time{}
		e.reads++
		e.stale.Store(false)
		r.unusable(ctx, e, nil, err)
		return nil
	case err != nil:
		// The query could not run (a timeout, a lock, the database
		// away): a tenant with a deliverer goes on with it, read again
		// after QueryRetry; one without waits and says why.
		e.failedAt = now
		if qe != nil {
			r.setDown(qe)
		}
		err = fmt.Errorf("destination %s: tenant %s: %w", r.cfg.Destination, e.tenant, err)
		r.queryWarn(ctx, e, err)
		if e.d == nil && qe != nil {
			e.err = err
			r.record(ctx, e)
		}
		return err
	}
	e.reads++
	e.failedAt = time.Time{}
	e.readAt = now
	if r.cfg.Settings != nil {
		r.setDown(nil) // it ran
	}
	e.stale.Store(false)
	if conn == nil && r.cfg.Settings != nil {
		level := slog.LevelDebug
		if e.d != nil {
			level = slog.LevelInfo // it was connected
		}
		if e.d != nil || e.err == nil {
			r.logger.Log(ctx, level, "tenants: no connection row for the tenant: its rows wait until one appears", slog.String("tenant", e.tenant))
		}
		e.d, e.grant, e.conn = nil, nil, nil
		e.err = fmt.Errorf("destination %s: tenant %s: %w", r.cfg.Destination, e.tenant, ErrUnconnected)
		r.record(ctx, e)
		return nil
	}
	if conn != nil && r.cfg.Replay != nil && conn.account != e.account {
		r.noteAccount(ctx, e)
	}
	if e.d != nil && conn != nil && e.conn != nil && conn.sum == e.conn.sum &&
		(conn.refreshToken == e.conn.refreshToken || e.tokens.knows(conn.refreshToken) || (e.grant != nil && !refused(e.d, now))) {
		// Unchanged. A new refresh token alone is no change either
		// (rotated by this process or another, stored by on_refresh):
		// the grant reads the stored token before each grant. Only a
		// refused tenant is built anew at once with it.
		return nil
	}
	d, grant, err := r.build(e, conn)
	if err != nil {
		r.unusable(ctx, e, conn, err)
		return nil
	}
	if e.d != nil {
		r.logger.InfoContext(ctx, "tenants: the tenant's connection row changed; sending with it from now on", slog.String("tenant", e.tenant))
	}
	e.d, e.grant, e.conn, e.err = d, grant, conn, nil
	r.record(ctx, e)
	return nil
}

// unusable makes err, what is wrong with e's row, the tenant's state: its
// rows wait. It is logged when it changes, not at every read.
func (r *Registry) unusable(ctx context.Context, e *entry, conn *connection, err error) {
	err = fmt.Errorf("destination %s: tenant %s: %w", r.cfg.Destination, e.tenant, err)
	if e.err == nil || e.err.Error() != err.Error() {
		r.logger.WarnContext(ctx, "tenants: a tenant's connection row cannot be used; its rows wait", slog.String("tenant", e.tenant), slog.String("error", err.Error()))
	}
	e.d, e.grant, e.conn, e.err = nil, nil, conn, err
	r.record(ctx, e)
}

// record writes e's connection fact in the tenant's namespace when it
// changed since this process last wrote it, so that status, the console
// and the gauges see an unconnected tenant (or one whose row cannot be
// used) from the database alone. The text is e.err's, which never holds a
// secret. A failure to write is logged; the next change writes again.
func (r *Registry) record(ctx context.Context, e *entry) {
	c := breakerstore.Connection{Unconnected: e.err != nil}
	if e.err != nil {
		c.Error = e.err.Error()
	}
	var qe *QueryError
	switch {
	case errors.Is(e.err, ErrInvalid):
		c.Kind = breakerstore.TenantInvalid
	case errors.As(e.err, &qe):
		c.Kind = breakerstore.TenantError
	}
	mark := "connected"
	if c.Unconnected {
		mark = c.Kind + " unconnected: " + c.Error
	}
	if mark == e.recorded {
		return
	}
	store, err := breakerstore.New(r.cfg.Pool, &breakerstore.Config{Namespace: r.namespace(e.tenant)})
	if err == nil {
		err = store.SetConnection(ctx, c)
	}
	if err != nil {
		r.logger.WarnContext(ctx, "tenants: record a tenant's connection", slog.String("tenant", e.tenant), slog.String("error", err.Error()))
		return
	}
	e.recorded = mark
}

// namespace is the namespace of tenant t's shared facts at the registry's
// destination.
func (r *Registry) namespace(t string) string {
	return breakerstore.TenantNamespace(r.cfg.Destination, tenant.Tenant(t))
}

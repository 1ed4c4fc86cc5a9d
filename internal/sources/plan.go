package sources

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/database"
)

// Plan is what Install would do with a configuration, found without
// changing anything (`syncer config check`).
type Plan struct {
	// Problems are the configured sources that cannot be installed (a
	// missing table, key or column, a key of a type a source cannot
	// have): each a *SourceError naming its source.
	Problems []error
	// Changes are what Install would change, one per source it would
	// install, update or remove; a source it would leave as it is has
	// none.
	Changes []Change
}

// PlanInstall inspects the sources of specs as Install would, in syncer's schema
// (q's current schema), and says what Install would change: a source not
// installed, installed with another table, key, columns or destination,
// whose triggers are missing, disabled or of an older version, or
// installed and no longer configured. It only reads.
func PlanInstall(ctx context.Context, q database.Querier, specs []Spec) (*Plan, error) {
	var schema string
	if err := q.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		return nil, fmt.Errorf("sources: current schema: %w", err)
	}
	plan := &Plan{}
	installed := map[string]installedRow{}
	// A schema never migrated has no source installed.
	var migrated bool
	if err := q.QueryRow(ctx, "SELECT to_regclass('syncer_sources') IS NOT NULL").Scan(&migrated); err != nil {
		return nil, fmt.Errorf("sources: installed sources: %w", err)
	}
	if migrated {
		rows, err := q.Query(ctx, `SELECT name, schema_name, table_name, key_column, key_kind, key_type, columns, destination,
				COALESCE(row_filter, ''), COALESCE(tenant_column, ''), lanes
			FROM syncer_sources ORDER BY name`)
		if err != nil {
			return nil, fmt.Errorf("sources: installed sources: %w", err)
		}
		var name string
		var r installedRow
		_, err = pgx.ForEachRow(rows, []any{&name, &r.schema, &r.table, &r.key, &r.kind, &r.keyType, &r.columns, &r.destination, &r.where, &r.tenant, &r.lanes}, func() error {
			installed[name] = r
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("sources: installed sources: %w", err)
		}
	}
	for i := range specs {
		c := &specs[i]
		s, err := inspect(ctx, q, c)
		if err != nil {
			var se *SourceError
			if !errors.As(err, &se) {
				return nil, err
			}
			plan.Problems = append(plan.Problems, err)
			continue
		}
		if c.ChangedAt != "" {
			var typ *string
			err := q.QueryRow(ctx, `SELECT format_type(a.atttypid, NULL) FROM pg_attribute a
				WHERE a.attrelid = to_regclass($1) AND a.attname = $2 AND a.attnum > 0 AND NOT a.attisdropped`,
				s.table(), c.ChangedAt).Scan(&typ)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				plan.Problems = append(plan.Problems, &SourceError{Source: c.Name,
					Err: fmt.Errorf("changed_at: %s has no column %s", s.QualifiedTable(), c.ChangedAt)})
			case err != nil:
				return nil, fmt.Errorf("sources: source %s: changed_at: %w", c.Name, err)
			case !slices.Contains([]string{"timestamp with time zone", "timestamp without time zone", "date"}, *typ):
				plan.Problems = append(plan.Problems, &SourceError{Source: c.Name,
					Err: fmt.Errorf("changed_at: %s is of type %s: the time of a row's last change must be a timestamptz, timestamp or date", c.ChangedAt, *typ)})
			}
		}
		prev, exists := installed[c.Name]
		ch := Change{Source: c.Name, Action: Updated}
		switch {
		case !exists:
			ch.Action, ch.Detail = Installed, "triggers not installed"
		case prev.tenant != s.Tenant:
			ch.Detail = "tenant changed: its pending work would be dropped and its snapshot restarted"
		case prev.schema != s.Schema || prev.table != s.Table || prev.key != s.Key || prev.kind != s.Kind:
			ch.Detail = fmt.Sprintf("installed on %s (key %s): its pending work would be dropped and its snapshot restarted",
				pgx.Identifier{prev.schema, prev.table}.Sanitize(), prev.key)
		case !slices.Equal(prev.columns, s.Columns):
			ch.Detail = "columns changed"
		case prev.destination != s.Destination:
			ch.Detail = fmt.Sprintf("destination changed from %s", prev.destination)
		case prev.where != s.Where:
			ch.Detail = "where changed"
		case s.Tenant != "" && prev.lanes != s.Lanes:
			ch.Detail = fmt.Sprintf("lanes changed from %d to %d: pending changes would move to their new lanes", prev.lanes, s.Lanes)
		default:
			current, err := triggersCurrent(ctx, q, schema, objectHash(schema, s.Name), s, captureBody(schema, s))
			if err != nil {
				return nil, fmt.Errorf("sources: source %s: %w", c.Name, err)
			}
			if current {
				continue
			}
			ch.Detail = "triggers missing, disabled or of an older syncer"
		}
		plan.Changes = append(plan.Changes, ch)
	}
	names := make([]string, 0, len(installed))
	for n := range installed {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if specNamed(specs, n) == nil {
			plan.Changes = append(plan.Changes, Change{Source: n, Action: Removed, Detail: "installed and no longer configured"})
		}
	}
	return plan, nil
}

package sources

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/tenant"
)

// KeyInRange reports whether key, in its text form, is a key of src within
// r's key bounds; a text that is no key of src is not.
func (s *Source) KeyInRange(key string, r ReplayRange) bool {
	k, err := s.NormalizeKey(key)
	if err != nil || k != key {
		return false
	}
	return (r.FromKey == "" || s.compareKeys(r.FromKey, k) <= 0) && (r.ToKey == "" || s.compareKeys(k, r.ToKey) <= 0)
}

// PresentOf returns those of keys (normalized, NormalizeKey) that are rows
// of src's table now; with a tenant t (not the zero Tenant), rows of t. `syncer
// verify` asks it of the keys the row's story says were deleted: those
// present again are checked with the table.
func PresentOf(ctx context.Context, q database.Querier, src *Source, t tenant.Tenant, keys []string) ([]string, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	cond := src.keyMatchSQL(src.keyValuesSQL("u.k"))
	if !t.IsZero() {
		if err := src.checkTenant(t.String()); err != nil {
			return nil, err
		}
		cond += " AND " + src.tenantText("t") + " = $2::text"
	}
	sql := `SELECT u.k FROM unnest($1::text[]) AS u(k) WHERE EXISTS (SELECT 1 FROM ` + src.table() + ` t WHERE ` + cond + `)`
	args := []any{keys}
	if !t.IsZero() {
		args = append(args, t.String())
	}
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, src.explain(ctx, q, fmt.Errorf("sources: source %s: present of: %w", src.Name, err))
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("sources: source %s: present of: %w", src.Name, err)
	}
	return out, nil
}

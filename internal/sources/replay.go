package sources

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/replays"
	"github.com/syncer-dev/syncer/internal/resources"
	"github.com/syncer-dev/syncer/internal/unchanged"
)

// ReplayRange selects the rows of a source that a replay exports once
// more. Its zero value is the whole table. It is the replays package's
// type, which stores it with the replay; this package checks it against
// the source (CheckRange) and makes it a condition on the table.
type ReplayRange = replays.SourceRange

// ErrBadKey is wrapped by the errors of a key that is not of the source's
// kind, or of a range whose start is after its end.
var ErrBadKey = errors.New("not a key of the source")

var uuidText = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// NormalizeKey returns text as the key's text form: an integer in decimal,
// a uuid in lower case. It is an error wrapping ErrBadKey when text
// cannot be a key of the source.
func (s *Source) NormalizeKey(text string) (string, error) {
	switch s.Kind {
	case KeyComposite:
		return s.normalizeComposite(text)
	case KeyInteger:
		n, err := strconv.ParseInt(strings.TrimSpace(text), 10, 64)
		if err != nil {
			return "", fmt.Errorf("%q is not an integer: %w", text, ErrBadKey)
		}
		return strconv.FormatInt(n, 10), nil
	case KeyUUID:
		u := strings.ToLower(strings.Trim(strings.TrimSpace(text), "{}"))
		if !uuidText.MatchString(u) {
			return "", fmt.Errorf("%q is not a uuid: %w", text, ErrBadKey)
		}
		return u, nil
	}
	return text, nil
}

// CheckRange normalizes r's keys and refuses a range whose start is after
// its end, or a time bound without its column.
func (s *Source) CheckRange(r *ReplayRange) error {
	var err error
	for _, k := range []*string{&r.FromKey, &r.ToKey} {
		if *k == "" {
			continue
		}
		if *k, err = s.NormalizeKey(*k); err != nil {
			return err
		}
	}
	if r.FromKey != "" && r.ToKey != "" && s.compareKeys(r.FromKey, r.ToKey) > 0 {
		return fmt.Errorf("from %s is after to %s: %w", r.FromKey, r.ToKey, ErrBadKey)
	}
	if r.Tenant != "" && s.Tenant == "" {
		return fmt.Errorf("source %s has no tenant column: %w", s.Name, ErrBadKey)
	}
	if (!r.Since.IsZero() || !r.Until.IsZero()) && r.ChangedColumn == "" {
		return errors.New("a time range needs the column of the rows' last change (changed_at)")
	}
	return nil
}

// compareKeys compares two normalized keys in the source's order.
func (s *Source) compareKeys(a, b string) int {
	if s.Kind == KeyComposite {
		return s.compareComposite(a, b)
	}
	if s.Kind == KeyInteger {
		x, _ := strconv.ParseInt(a, 10, 64)
		y, _ := strconv.ParseInt(b, 10, 64)
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	}
	return strings.Compare(a, b)
}

// rangeSQL is r's condition on the table aliased t, with its parameters
// numbered from next on.
func (s *Source) rangeSQL(r ReplayRange, next int) (string, []any) {
	key := "t." + pgx.Identifier{s.Key}.Sanitize()
	var conds []string
	var args []any
	param := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(next+len(args)-1)
	}
	bound := func(op, v string) {
		switch s.Kind {
		case KeyComposite:
			// Column by column, text in byte order whatever its collation.
			cols, vals := s.keyColumns("t"), s.keyValuesSQL(param(v)+"::text")
			for i, k := range s.Kinds {
				if k == KeyText {
					cols[i] += ` COLLATE "C"`
				}
			}
			conds = append(conds, rowSQL(cols)+" "+op+" "+rowSQL(vals))
		case KeyInteger:
			conds = append(conds, key+" "+op+" "+param(v)+"::bigint")
		case KeyUUID:
			conds = append(conds, key+" "+op+" "+param(v)+"::uuid")
		default:
			// Byte order, whatever the column's collation.
			conds = append(conds, key+` COLLATE "C" `+op+" "+param(v)+"::text")
		}
	}
	if r.FromKey != "" {
		bound(">=", r.FromKey)
	}
	if r.ToKey != "" {
		bound("<=", r.ToKey)
	}
	changed := "t." + pgx.Identifier{r.ChangedColumn}.Sanitize()
	if !r.Since.IsZero() {
		conds = append(conds, changed+" >= "+param(r.Since)+"::timestamptz")
	}
	if !r.Until.IsZero() {
		conds = append(conds, changed+" < "+param(r.Until)+"::timestamptz")
	}
	if r.Tenant != "" && s.Tenant != "" {
		conds = append(conds, s.tenantText("t")+" = "+param(r.Tenant)+"::text")
	}
	if len(conds) == 0 {
		return "true", nil
	}
	return strings.Join(conds, " AND "), args
}

// CountReplay counts the rows of src's table in r: what a replay would
// send, and what --dry-run prints. It reads the application's table.
func CountReplay(ctx context.Context, q database.Querier, src *Source, r ReplayRange) (int64, error) {
	cond, args := src.rangeSQL(r, 1)
	var n int64
	if err := q.QueryRow(ctx, `SELECT count(*) FROM `+src.table()+` t WHERE `+cond+src.filterAnd(), args...).Scan(&n); err != nil {
		return 0, src.explain(ctx, q, fmt.Errorf("sources: source %s: count replay: %w", src.Name, err))
	}
	return n, nil
}

// ReplayTable is src as a replay's Table (replays.PlanReplay): its
// ranges are of keys and of the time of last change.
func ReplayTable(src *Source) replays.Table { return replayTable{src} }

// Starting forgets the digests of the bodies the third party accepted for
// src, in the transaction that starts its replay (replays.Starter): a
// replay is an explicit re-export, so none of its keys is skipped as
// unchanged.
func (t replayTable) Starting(ctx context.Context, tx pgx.Tx) error {
	return unchanged.Forget(ctx, tx, t.src.Name)
}

type replayTable struct{ src *Source }

func (t replayTable) Name() string { return t.src.Name }

// CountReplay refuses the bounds of resources' range, checks the rest
// against the source (CheckRange) and counts its rows.
func (t replayTable) CountReplay(ctx context.Context, q database.Querier, r *replays.Request) (int64, error) {
	if r.Filter != (resources.Filter{}) {
		return 0, fmt.Errorf("ids, creation times and --failed select rows of resources, not of source %s: %w", t.src.Name, replays.ErrBadRange)
	}
	if err := t.src.CheckRange(&r.Range); err != nil {
		return 0, err
	}
	return CountReplay(ctx, q, t.src, r.Range)
}

// ReplaysUnsent counts, for each source replay of logged, the keys its
// source (its tenant's, for a replay of one tenant) still has pending
// from changes up to the replay's last one:
// queued by it (or by a write meanwhile) and not yet accepted or
// rejected. It is the replays.Unsent of the replay model: syncer_changes
// is this package's table, the replay's last_seq replays'.
func ReplaysUnsent(ctx context.Context, q database.Querier, logged []replays.SourceProgress) (map[int64]int64, error) {
	out := make(map[int64]int64, len(logged))
	var ids, lastSeqs []int64
	var srcs, tenants []string
	for _, p := range logged {
		ids, srcs, lastSeqs = append(ids, p.ID), append(srcs, p.Source), append(lastSeqs, p.LastSeq)
		tenants = append(tenants, p.Range.Tenant.String())
	}
	if len(ids) == 0 {
		return out, nil
	}
	// A replay of one tenant's rows counts that tenant's keys only: the
	// other tenants' pending keys (a paused or unconnected tenant's wait
	// for long) are none of its progress.
	rows, err := q.Query(ctx, `SELECT r.id, (SELECT count(*) FROM (SELECT DISTINCT c.num, c.key FROM syncer_changes c
				WHERE c.source = r.source AND c.seq <= r.last_seq AND (r.tenant = '' OR c.tenant = r.tenant)) k)
		FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::text[]) AS r (id, source, last_seq, tenant)`, ids, srcs, lastSeqs, tenants)
	if err != nil {
		return nil, fmt.Errorf("sources: replays unsent: %w", err)
	}
	var id, unsent int64
	_, err = pgx.ForEachRow(rows, []any{&id, &unsent}, func() error {
		out[id] = unsent
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sources: replays unsent: %w", err)
	}
	return out, nil
}

// replayChunk logs a change for the next chunk rows of the oldest
// unfinished replay of src, in key order from its cursor, as a snapshot
// chunk does (a share lock on those rows only, the cursor moved in the
// same transaction), and reports whether src has no replay left to log.
// A replay whose last chunk is logged is done: its keys are then pending
// like any change. A cancelled replay logs nothing more.
func replayChunk(ctx context.Context, db database.DB, src *Source, chunk int) (done bool, err error) {
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", SnapshotLockTimeout.Milliseconds())); err != nil {
			return err
		}
		id, err := replays.NextOfSource(ctx, tx, src.Name)
		if err != nil {
			return err
		}
		if id == 0 {
			done = true
			return nil
		}
		cur, err := replays.LockSourceCursor(ctx, tx, id)
		if err != nil {
			return err
		}
		if cur.State.Finished() {
			// Cancelled since NextOfSource chose it: the next call
			// takes the next replay.
			return nil
		}
		if err := replays.Start(ctx, tx, id); err != nil {
			return err
		}
		cond, args := src.rangeSQL(cur.Range, 3)
		args = append([]any{src.Name, chunk}, args...)
		if cur.AfterKey != nil {
			args = append(args, *cur.AfterKey)
			cond += " AND " + rowSQL(src.keyColumns("t")) + " > " + rowSQL(src.keyValuesSQL("$"+strconv.Itoa(len(args))+"::text"))
		}
		var n, last int64
		var lastKey *string
		err = tx.QueryRow(ctx, src.logKeysSQL(" WHERE "+cond), args...).Scan(&n, &lastKey, &last)
		if err != nil {
			return err
		}
		if err := replays.AdvanceSourceCursor(ctx, tx, id, lastKey, n, last); err != nil {
			return err
		}
		if n < int64(chunk) {
			if _, err := replays.Finish(ctx, tx, id); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
			return false, ErrSnapshotBusy
		}
		return false, src.explain(ctx, db, fmt.Errorf("sources: source %s: replay: %w", src.Name, err))
	}
	return done, nil
}

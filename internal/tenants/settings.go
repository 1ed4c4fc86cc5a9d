package tenants

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/syncer-dev/syncer/internal/database"
)

// Settings are a destination's tenants block, as the configuration file
// writes it (docs/destinations.md, "Tenants").
type Settings struct {
	// Query is run with the tenant's value as $1 and gives at most one
	// row: the tenant's connection (Columns, and any other column, which
	// the custom format's programs see as $tenant.<column>). Required.
	Query string
	// OnRefresh is run as ($1 tenant, $2 new refresh token), in its own
	// transaction, when the token endpoint rotates a tenant's refresh
	// token. Defaults to "": a rotated token is kept in memory only.
	OnRefresh string
	// Timeout bounds one run of Query, a wait for a lock included
	// (statement_timeout and lock_timeout, set for its transaction only).
	// Defaults to QueryTimeoutDefault (5 s).
	Timeout time.Duration
	// NoReplayOnChange is tenants.replay_on_change: false: a tenant whose
	// account changes (its url, its account column) gets no replay of
	// its live rows. Defaults to false: it gets one.
	NoReplayOnChange bool
}

// The columns of a connection row that say how to reach and authenticate
// as the tenant. Every other column is the custom format's
// $tenant.<column>.
const (
	ColumnURL          = "url"
	ColumnToken        = "token"
	ColumnUsername     = "username"
	ColumnPassword     = "password"
	ColumnClientID     = "client_id"
	ColumnClientSecret = "client_secret"
	ColumnRefreshToken = "refresh_token"
	ColumnHeaders      = "headers"
	// The tenant's own limits (contract section 10.1): numbers; NULL or
	// absent, the destination's.
	ColumnRateLimit   = "rate_limit"
	ColumnRateBurst   = "rate_burst"
	ColumnMaxInFlight = "max_in_flight"
	// ColumnAccount names the account the row sends the tenant to, where
	// its url does not (one API host for every account): a change of it,
	// or of url, replays the tenant's live rows to the new account. It is
	// also $tenant.account of the custom format.
	ColumnAccount = "account"
)

// Columns are the connection row's known columns.
var Columns = []string{ColumnURL, ColumnToken, ColumnUsername, ColumnPassword, ColumnClientID, ColumnClientSecret, ColumnRefreshToken, ColumnHeaders,
	ColumnRateLimit, ColumnRateBurst, ColumnMaxInFlight, ColumnAccount}

// reservedColumn is $tenant.id, the tenant's value: no column may take it.
const reservedColumn = "id"

// CheckSpec is what Check knows of the destination beyond its tenants
// block.
type CheckSpec struct {
	// HasURL says the destination has a url of its own: without one, the
	// query must return url.
	HasURL bool
	// HasTokenURL says the destination's auth has a token_url: without
	// one, client_id, client_secret and refresh_token cannot be used.
	HasTokenURL bool
	// Programs says the format's programs read $tenant (the custom
	// format): without them, a column beyond Columns is read by nothing.
	Programs bool
}

// FieldError is a tenants setting that cannot work, naming its field
// ("tenants.query", "tenants.on_refresh"). It never quotes a value the
// query returns.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// errCompiled ends Check's read-only transaction: nothing it ran is kept.
var errCompiled = errors.New("tenants: checked")

// Check compiles s's statements on db without changing anything: the
// query runs once with no tenant ($1 NULL), wrapped so that it returns no
// row, and on_refresh runs in a read-only transaction, where PostgreSQL
// parses and plans it and then refuses to write. Every error is a
// *FieldError naming the field: a statement that does not compile, or a
// column the destination cannot use.
func Check(ctx context.Context, db database.DB, s *Settings, spec CheckSpec) error {
	if s == nil {
		return nil
	}
	var cols []string
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET TRANSACTION READ ONLY"); err != nil {
			return err
		}
		// As the daemon runs it: a connections table locked by a
		// migration fails the check in tenants.timeout, not never.
		ms := fmt.Sprintf("%dms", max(cmp.Or(s.Timeout, QueryTimeoutDefault).Milliseconds(), 1))
		if _, err := tx.Exec(ctx, `SELECT set_config('statement_timeout', $1, true), set_config('lock_timeout', $1, true)`, ms); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, wrapPrefix+trimStatement(s.Query)+"\n) AS tenant_connection WHERE false", nil)
		if err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && (pe.Code == "57014" || pe.Code == "55P03") {
				return &FieldError{Field: "tenants.query", Err: fmt.Errorf("%w: it ran past tenants.timeout (%s): a table it reads is locked, or the query is slow",
					pgText(err, len(wrapPrefix)), cmp.Or(s.Timeout, QueryTimeoutDefault))}
			}
			return &FieldError{Field: "tenants.query", Err: pgText(err, len(wrapPrefix))}
		}
		for _, f := range rows.FieldDescriptions() {
			cols = append(cols, f.Name)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return &FieldError{Field: "tenants.query", Err: pgText(err, len(wrapPrefix))}
		}
		if s.OnRefresh != "" {
			// A savepoint: the refused write must not end the check.
			err := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
				_, err := sp.Exec(ctx, s.OnRefresh, nil, nil)
				return err
			})
			var pe *pgconn.PgError
			if err != nil && !(errors.As(err, &pe) && pe.Code == "25006") { // read_only_sql_transaction: it compiled
				return &FieldError{Field: "tenants.on_refresh", Err: pgText(err, 0)}
			}
		}
		return errCompiled
	})
	if err != nil && !errors.Is(err, errCompiled) {
		var fe *FieldError
		if errors.As(err, &fe) {
			return fe
		}
		return fmt.Errorf("tenants: check: %w", err)
	}
	return checkColumns(cols, spec)
}

// checkColumns names the first column the destination cannot use.
func checkColumns(cols []string, spec CheckSpec) error {
	bad := func(format string, args ...any) error {
		return &FieldError{Field: "tenants.query", Err: fmt.Errorf(format, args...)}
	}
	seen := map[string]bool{}
	for _, c := range cols {
		switch {
		case seen[c]:
			return bad("returns column %q twice", c)
		case c == "?column?":
			return bad("returns a column without a name: name it with AS (url, token, ... or a name of your own)")
		case c == reservedColumn:
			return bad("returns column %q, which is $tenant.id, the tenant's value: name it otherwise", c)
		case (c == ColumnClientID || c == ColumnClientSecret || c == ColumnRefreshToken) && !spec.HasTokenURL:
			return bad("returns column %q, which needs auth.token_url on the destination", c)
		case !slices.Contains(Columns, c) && !spec.Programs:
			return bad("returns unknown column %q (known: %s; other columns are $tenant.<column> of the custom format only)", c, strings.Join(Columns, ", "))
		}
		seen[c] = true
	}
	if !spec.HasURL && !seen[ColumnURL] {
		return bad("must return column url: the destination has no url of its own")
	}
	return nil
}

// trimStatement drops a trailing semicolon, so that the statement can be
// wrapped.
func trimStatement(q string) string {
	return strings.TrimRight(strings.TrimSpace(q), "; \t\r\n")
}

// wrapPrefix starts the statement a query is wrapped in.
const wrapPrefix = "SELECT * FROM ("

// pgText is PostgreSQL's own message of err, with its position in the
// statement as written (offset is what a wrapping put before it): what a
// person fixing the statement needs, and no value of a row.
func pgText(err error, offset int) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		msg := pe.Message
		if strings.HasPrefix(pe.Code, "22") {
			// A data exception quotes the value it could not take
			// ("invalid input syntax for type integer: ..."): a token,
			// maybe.
			msg = "a value of the row or a parameter is not of the column's type (SQLSTATE " + pe.Code + "; PostgreSQL's message is left out: it may quote a secret)"
		}
		if pos := int(pe.Position) - offset; pos > 0 {
			msg += fmt.Sprintf(" (at character %d)", pos)
		}
		return errors.New(msg)
	}
	return err
}

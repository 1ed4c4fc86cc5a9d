package database

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Pools is what OpenPools opened: the pool, and how to open the
// connections that hold session state.
type Pools struct {
	// Pool runs every statement but the sessions' own.
	Pool *pgxpool.Pool
	// Session is the config of the connections that may hold session
	// state (the locks' holder, the relay's LISTEN): SYNCER_DIRECT_URL's
	// when it is given, else the pool's own. Open them with Connect.
	Session *pgx.ConnConfig
	// Stateless is true when the pool goes through a transaction pooler:
	// its connections hold no session state (no prepared statement, no
	// session setting, no advisory lock, no LISTEN), and one connection's
	// transactions may each run on another server session.
	Stateless bool
	// NoSession is true when no connection may hold session state: the
	// pool goes through a transaction pooler and no SYNCER_DIRECT_URL is
	// given. The locks are then leases alone and the relay polls instead
	// of listening (docs/design.md, "Transaction pooling without a direct
	// URL"); Session is the pool's config, for nothing that keeps state.
	NoSession bool
}

// Close closes the pool.
func (p *Pools) Close() { p.Pool.Close() }

// OpenPools opens the pool of rawURL (DATABASE_URL) and, when directURL
// (SYNCER_DIRECT_URL) is not empty, checks that it leads to PostgreSQL
// directly or through a session pooler: then it is the one URL whose
// connections hold session state, and rawURL may go through a pooler in
// transaction mode, where the pool keeps none (see Stateless): its
// statements run in pgx's QueryExecModeCacheDescribe (the unnamed
// statement, each round trip standing alone, nothing prepared for later),
// and only the settings a pooler passes on in the startup packet are made
// (application_name); the others (search_path, jit,
// idle_in_transaction_session_timeout) are the role's or the database's,
// which a transaction pooler's server sessions have from their start
// (ALTER ROLE ... SET). A URL that sets one of them, or a schema the
// role's search_path does not put first, is refused with the fix.
//
// rawURL through a transaction pooler without directURL works too: then
// nothing may hold session state (NoSession). Refused at start, each with
// a PoolerError naming the fix: directURL through a transaction pooler,
// and a pooler in statement mode on either.
func OpenPools(ctx context.Context, rawURL, directURL, role, schema string) (*Pools, error) {
	cfg, added, err := parsePool(rawURL, role)
	if err != nil {
		return nil, err
	}
	mode, reason, err := DetectPooling(ctx, cfg.ConnConfig)
	if err != nil {
		return nil, fmt.Errorf("database: cannot connect to %s: %w", Describe(cfg.ConnConfig), err)
	}
	if mode == StatementPooling {
		return nil, fmt.Errorf("database: %w", &PoolerError{Name: "DATABASE_URL", Where: Describe(cfg.ConnConfig), Reason: reason, Mode: mode})
	}
	var session *pgx.ConnConfig
	if directURL != "" {
		if session, err = openDirect(ctx, directURL, role, schema); err != nil {
			return nil, err
		}
	}
	stateless := mode == TransactionPooling
	if stateless {
		if err := keepNoSessionState(cfg, added); err != nil {
			return nil, err
		}
	} else {
		// Past a pooler, only a few parameters may go in the startup packet.
		ApplySettings(cfg.ConnConfig, nil)
		if schema != "" {
			// After the settings: the URL's search_path is set first, and the
			// schema goes before it.
			UseSchema(cfg.ConnConfig, schema)
		}
	}
	pool, err := openPool(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if stateless && schema != "" {
		if err := checkRoleSchema(ctx, pool, schema); err != nil {
			pool.Close()
			return nil, err
		}
	}
	if session == nil {
		session = pool.Config().ConnConfig
	}
	// The pool's trim (TrimPool) traces the pool: not the sessions, nor
	// a pool opened from their config (a Locker's own).
	session.Tracer = nil
	return &Pools{Pool: pool, Session: session, Stateless: stateless, NoSession: stateless && directURL == ""}, nil
}

// openDirect checks directURL and returns its config, with the settings
// and the schema of a session of syncer's.
func openDirect(ctx context.Context, directURL, role, schema string) (*pgx.ConnConfig, error) {
	cfg, _, err := parsePool(directURL, role)
	if err != nil {
		var ue *URLError
		if errors.As(err, &ue) {
			return nil, fmt.Errorf("database: SYNCER_DIRECT_URL: %w", ue)
		}
		return nil, err
	}
	mode, reason, err := DetectPooling(ctx, cfg.ConnConfig)
	if err != nil {
		return nil, fmt.Errorf("database: cannot connect to %s (SYNCER_DIRECT_URL): %w", Describe(cfg.ConnConfig), err)
	}
	if mode == TransactionPooling || mode == StatementPooling {
		return nil, fmt.Errorf("database: %w", &PoolerError{Name: "SYNCER_DIRECT_URL", Where: Describe(cfg.ConnConfig), Reason: reason, Mode: mode})
	}
	cc := cfg.ConnConfig
	ApplySettings(cc, nil)
	if schema != "" {
		UseSchema(cc, schema)
	}
	return cc, nil
}

// keepNoSessionState makes cfg's connections carry no session state
// through a transaction pooler: what it may not set is refused, with the
// fix, when the URL set it (added are syncer's own defaults, dropped).
func keepNoSessionState(cfg *pgxpool.Config, added map[string]bool) error {
	cc := cfg.ConnConfig
	var refused []string
	for k := range cc.RuntimeParams {
		if startupParams[strings.ToLower(k)] {
			continue
		}
		if !added[k] {
			refused = append(refused, k)
		}
		delete(cc.RuntimeParams, k)
	}
	if len(refused) > 0 {
		slices.Sort(refused)
		return &SetupError{msg: fmt.Sprintf("DATABASE_URL (%s): "+
			"through a pooler in transaction mode a session setting would stay on the pooler's server session, "+
			"not follow syncer's: remove %s from DATABASE_URL and set it for the role instead "+
			"(ALTER ROLE %s SET %s = ...)", Describe(cc), strings.Join(refused, ", "), pgx.Identifier{cc.User}.Sanitize(), refused[0])}
	}
	// Nothing prepared by name. QueryExecModeCacheDescribe describes a
	// statement once (Parse and Describe of the unnamed statement, Sync)
	// and runs it from then on with Parse, Bind, Execute and Sync in one
	// round trip, the parameters' types from the description: each round
	// trip stands alone, so a pooler may run them on different server
	// sessions. Not QueryExecModeDescribeExec, whose Execute binds the
	// unnamed statement its Describe left on a server session; not
	// QueryExecModeExec, whose parameters go as text of a type the server
	// guesses ([]byte for a jsonb is then a bytea's text, which no jsonb
	// parses).
	cc.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	cc.StatementCacheCapacity = 0
	cc.DescriptionCacheCapacity = max(cc.DescriptionCacheCapacity, StatementCacheCapacity)
	return nil
}

// checkRoleSchema checks that the pool's sessions find syncer's tables in
// schema: through a transaction pooler, the search_path is the role's.
func checkRoleSchema(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	var current *string
	if err := pool.QueryRow(ctx, "SELECT current_schema()").Scan(&current); err != nil {
		return fmt.Errorf("database: current schema: %w", err)
	}
	if current != nil && *current == schema {
		return nil
	}
	cc := pool.Config().ConnConfig
	q := pgx.Identifier{schema}.Sanitize()
	return &SetupError{msg: fmt.Sprintf("DATABASE_URL (%s): "+
		"through a pooler in transaction mode syncer's schema %s must come first on the role's search_path, "+
		"which its sessions start with: ALTER ROLE %s SET search_path = %s, public (after `syncer migrate` created it)",
		Describe(cc), schema, pgx.Identifier{cc.User}.Sanitize(), q)}
}

// SetupError is a setting that cannot work through a transaction pooler,
// with its fix. It is the user's setting: the CLI exits 2 on it.
type SetupError struct{ msg string }

func (e *SetupError) Error() string { return e.msg }

// IsUsage reports that the error is the user's setting.
func (e *SetupError) IsUsage() bool { return true }

// Package database opens syncer's connection pool. Its errors name the host
// and database but never the password: a malformed URL is reported from its
// redacted form, and connection errors here are rebuilt from the parsed
// config.
//
// Every session a daemon opens carries an application_name that names the
// machine and the process ("syncer run web-3:4711"), so whoever reads
// pg_stat_activity (and `syncer status`, for the lock holder) can tell the
// daemons apart.
//
// Settings other than the few a connection pooler passes on in the startup
// packet (search_path, jit, ...) are made with set_config once connected
// (ApplySettings), so syncer works through PgBouncer in session mode with
// its stock settings. Through a pooler in transaction mode the pool keeps
// no session state, and the one connection that may hold some is
// SYNCER_DIRECT_URL's (OpenPools); without it Open refuses, with a
// PoolerError that names the fix (DetectPooling says how it knows).
//
// Its sessions end a transaction left idle for IdleInTransactionTimeoutDefault
// unless the URL says otherwise, so a frozen process holds no lock for
// longer.
//
// Its sessions run with jit off unless the URL sets it: every statement
// syncer runs is short and index-driven, and a planner's estimate over a
// table never analyzed (the sources' stats, 180 rows guessed for a table of
// one) once made PostgreSQL spend 380 ms compiling a 10 ms query, every few
// seconds, on every daemon.
package database

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrNotMigrated means the schema is missing or older than this binary.
var ErrNotMigrated = errors.New("database is not migrated: run `syncer migrate`")

// ErrBadURL is wrapped by every URLError, for errors.Is.
var ErrBadURL = errors.New("malformed DATABASE_URL")

// IdleInTransactionTimeoutDefault is the idle_in_transaction_session_timeout
// of the pool's sessions when the URL sets none. syncer's own transactions
// never wait on the client for long; a process frozen inside one (SIGSTOP, a
// paused VM) would otherwise keep its row and advisory locks (the relay's
// among them) for as long as it stays frozen, and stall the daemon that
// takes its export lock over. The lock sessions set 0: they hold the lock
// idle, sometimes inside a transaction.
const IdleInTransactionTimeoutDefault = "10s"

// ConnectTimeoutDefault bounds a connection attempt when the URL sets no
// connect_timeout.
const ConnectTimeoutDefault = 10 * time.Second

// The pool's bounds, unless the URL sets them (pool_max_conns,
// pool_max_conn_idle_time, pool_health_check_period): a daemon holds at
// most 4 server connections idle and 8 under load, whatever its sources,
// lanes and tenants (contract section 12, "Sessions"; docs/design.md).
// The pool is 5 of them under load, River's polls and jobs and the locks'
// transactions on it, and 2 idle (Trim: pgxpool's idle close alone kept
// all 5); the locks' holder session and the relay's listener are the rest
// (River polls: it keeps no listener). pgxpool's own
// default grows with the machine's CPUs, and keeps an idle connection
// half an hour.
const (
	// PoolMaxConnsDefault bounds the pool under load.
	PoolMaxConnsDefault = 5
	// PoolIdleTimeDefault is how long a pooled connection stays open
	// unused; the health check, every PoolHealthCheckDefault, closes it
	// then. The trim (Trim) closes those above the floor sooner. Not
	// shorter: at 5 s the pool closed and opened connections every few
	// seconds for the daemon's periodic work (the gauges, the presence,
	// River's maintenance), each a backend's start on the server.
	PoolIdleTimeDefault    = 30 * time.Second
	PoolHealthCheckDefault = 5 * time.Second
)

// boundPool applies the pool's bounds that rawURL does not set.
func boundPool(cfg *pgxpool.Config, rawURL string) {
	if !strings.Contains(rawURL, "pool_max_conns") {
		cfg.MaxConns = PoolMaxConnsDefault
	}
	if !strings.Contains(rawURL, "pool_max_conn_idle_time") {
		cfg.MaxConnIdleTime = PoolIdleTimeDefault
	}
	if !strings.Contains(rawURL, "pool_health_check_period") {
		cfg.HealthCheckPeriod = PoolHealthCheckDefault
	}
}

// appNameMax is PostgreSQL's limit on application_name (NAMEDATALEN - 1):
// the server truncates longer names, which could cut the pid in half.
const appNameMax = 63

// URLError is a DATABASE_URL that cannot be parsed. Its text names the URL
// with the password removed and pgx's reason, which pgx already masks; it
// never holds the password.
type URLError struct {
	// Redacted is the URL without its password, or "(unparseable)".
	Redacted string
	err      error
}

func (e *URLError) Error() string {
	return fmt.Sprintf("%s %s: %v", ErrBadURL, e.Redacted, e.err)
}

// Unwrap makes errors.Is(err, ErrBadURL) true.
func (e *URLError) Unwrap() []error { return []error{ErrBadURL, e.err} }

// IsUsage reports that the error is the user's setting, not a failure: the
// CLI exits 2 on it.
func (e *URLError) IsUsage() bool { return true }

// ParseURL parses a DATABASE_URL into a pool config whose connections send
// no cancel request (NoCancelRequests). A malformed URL is a *URLError.
func ParseURL(rawURL string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		return nil, &URLError{Redacted: Redact(rawURL), err: scrub(err, rawURL)}
	}
	// The pool's connections, River's among them (the listener too: a
	// pool's connection hijacked); the dedicated sessions of the locks and
	// the relay copy ConnConfig and open theirs with Connect.
	NoCancelRequests(cfg)
	// pgx takes these two out of the URL as it parses it: a capacity the
	// URL names is kept.
	if !strings.Contains(rawURL, "statement_cache_capacity") {
		cfg.ConnConfig.StatementCacheCapacity = StatementCacheCapacity
	}
	if !strings.Contains(rawURL, "description_cache_capacity") {
		cfg.ConnConfig.DescriptionCacheCapacity = DescriptionCacheCapacity
	}
	return cfg, nil
}

// Each session's caches of prepared statements and of statement
// descriptions. pgx sizes both for 512 statements, and makes each a map
// of that many entries at once (26 KB): two a session, 0.47 MB of the
// daemon's 2.2 MB live heap at rest with its nine sessions, doubled in
// its peak by the collector (issue 55). A pool session of the daemon had
// prepared at most 32 statements at the end of a drain
// (pg_prepared_statements), so 128 leaves room for what a long run adds
// (verify, tidy, status) before the least used is prepared again; the
// description cache serves only pgx.QueryExecModeCacheDescribe, which
// only a pool through a transaction pooler uses (OpenPools, sized as the
// statement cache there). statement_cache_capacity and
// description_cache_capacity in the URL set them.
const (
	StatementCacheCapacity   = 128
	DescriptionCacheCapacity = 16
)

// scrub removes the URL's password from err's text, should a pgx version
// ever echo it.
func scrub(err error, rawURL string) error {
	u, perr := url.Parse(rawURL)
	if perr != nil || u.User == nil {
		return err
	}
	pw, ok := u.User.Password()
	if !ok || pw == "" || !strings.Contains(err.Error(), pw) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), pw, "xxxxx"))
}

// ApplicationName is the application_name of a process's sessions: role
// (what the process is, "syncer run"), then host:pid, cut to PostgreSQL's 63
// bytes by shortening the host, never the pid.
func ApplicationName(role string) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return applicationName(role, host, os.Getpid())
}

func applicationName(role, host string, pid int) string {
	tail := ":" + strconv.Itoa(pid)
	if len(role) > 30 {
		role = role[:30]
	}
	room := appNameMax - len(role) - 1 - len(tail)
	if len(host) > room {
		host = host[:max(room, 0)]
	}
	return role + " " + host + tail
}

// ParseApplicationName reads what ApplicationName wrote: role, host and the
// process id. ok is false for any other name (another tool's session).
func ParseApplicationName(name string) (role, host string, pid int, ok bool) {
	i := strings.LastIndexByte(name, ' ')
	if i <= 0 {
		return "", "", 0, false
	}
	h, p, found := strings.Cut(name[i+1:], ":")
	if !found {
		return "", "", 0, false
	}
	pid, err := strconv.Atoi(p)
	if err != nil || pid <= 0 || h == "" {
		return "", "", 0, false
	}
	return name[:i], h, pid, true
}

// Open parses rawURL, opens a pool and checks that the database answers.
// Its sessions are named ApplicationName(role) unless the URL names them.
// A malformed URL is a *URLError.
func Open(ctx context.Context, rawURL, role string) (*pgxpool.Pool, error) {
	return OpenIn(ctx, rawURL, role, "")
}

// OpenIn is Open with syncer's objects in schema (SYNCER_SCHEMA), when not
// empty: see UseSchema. It refuses a transaction pooler: OpenPools with
// SYNCER_DIRECT_URL works through one.
func OpenIn(ctx context.Context, rawURL, role, schema string) (*pgxpool.Pool, error) {
	p, err := OpenPools(ctx, rawURL, "", role, schema)
	if err != nil {
		return nil, err
	}
	return p.Pool, nil
}

// parsePool parses rawURL into a pool config with syncer's defaults: the
// pool's bounds, the sessions' name, jit off, the idle-in-transaction
// timeout and the connect timeout, each unless the URL sets it. added
// names the runtime parameters set here, not by the URL.
func parsePool(rawURL, role string) (cfg *pgxpool.Config, added map[string]bool, err error) {
	cfg, err = ParseURL(rawURL)
	if err != nil {
		return nil, nil, fmt.Errorf("database: %w", err)
	}
	boundPool(cfg, rawURL)
	TrimPool(cfg, DefaultTrim())
	added = map[string]bool{}
	rp := cfg.ConnConfig.RuntimeParams
	if _, ok := rp["application_name"]; !ok && role != "" {
		rp["application_name"] = ApplicationName(role)
	}
	if _, ok := rp["jit"]; !ok {
		rp["jit"], added["jit"] = "off", true
	}
	if _, ok := rp["idle_in_transaction_session_timeout"]; !ok {
		rp["idle_in_transaction_session_timeout"] = IdleInTransactionTimeoutDefault
		added["idle_in_transaction_session_timeout"] = true
	}
	if cfg.ConnConfig.ConnectTimeout <= 0 {
		cfg.ConnConfig.ConnectTimeout = ConnectTimeoutDefault
	}
	return cfg, added, nil
}

// openPool opens the pool of cfg and checks that the database answers.
func openPool(ctx context.Context, cfg *pgxpool.Config) (*pgxpool.Pool, error) {
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, cfg.ConnConfig.ConnectTimeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("database: cannot connect to %s: %w", Describe(cfg.ConnConfig), err)
	}
	return pool, nil
}

// UseSchema makes every session of c (the pool's, and the dedicated
// sessions of locks and the relay, which copy its ConnConfig) put schema
// first on its search_path, before the path it had (the URL's, else the
// role's or the database's): syncer's and River's tables, all named
// unqualified, are created and found in schema, while an application's
// tables named unqualified in the configuration still resolve where they
// always did. It is set after connecting, not as a startup parameter,
// which a pooler may refuse.
func UseSchema(c *pgx.ConnConfig, schema string) {
	q := quoteLiteral(pgx.Identifier{schema}.Sanitize())
	sql := `SELECT set_config('search_path', CASE WHEN current_setting('search_path') = '' THEN ` + q +
		` ELSE ` + q + ` || ', ' || current_setting('search_path') END, false)`
	prev := c.AfterConnect
	c.AfterConnect = func(ctx context.Context, pc *pgconn.PgConn) error {
		if prev != nil {
			if err := prev(ctx, pc); err != nil {
				return err
			}
		}
		if err := pc.Exec(ctx, sql).Close(); err != nil {
			return fmt.Errorf("database: set search_path for schema %s: %w", schema, err)
		}
		return nil
	}
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// Describe names where a config points, without credentials.
func Describe(c *pgx.ConnConfig) string {
	return fmt.Sprintf("host=%s port=%d database=%s user=%s", c.Host, c.Port, c.Database, c.User)
}

// Redact removes the password from a URL for messages.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		return "(unparseable)"
	}
	return u.Redacted()
}

// CurrentSchema returns the schema unqualified names resolve to.
func CurrentSchema(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	var schema *string
	if err := pool.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		return "", fmt.Errorf("database: current schema: %w", err)
	}
	if schema == nil {
		return "", ErrNotMigrated
	}
	return *schema, nil
}

// CreateSchema creates schema if it does not exist, for syncer's objects
// (SYNCER_SCHEMA). The pool's sessions, whose search_path names it
// already, find it from their next statement on.
func CreateSchema(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	// Created only when missing: CREATE SCHEMA IF NOT EXISTS asks for the
	// database's CREATE privilege even when the schema is there.
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT to_regnamespace($1) IS NOT NULL", pgx.Identifier{schema}.Sanitize()).Scan(&exists); err != nil {
		return fmt.Errorf("database: find schema %s: %w", schema, err)
	}
	if exists {
		return nil
	}
	if _, err := pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return fmt.Errorf("database: create schema %s: %w", schema, err)
	}
	return nil
}

// CheckMigrated returns ErrNotMigrated unless syncer's schema is at version
// want or later.
func CheckMigrated(ctx context.Context, pool *pgxpool.Pool, want int) error {
	var have *int32
	err := pool.QueryRow(ctx, `SELECT max(version) FROM syncer_migrations`).Scan(&have)
	if err != nil {
		var pgErr interface{ SQLState() string }
		if errors.As(err, &pgErr) && pgErr.SQLState() == "42P01" {
			return ErrNotMigrated
		}
		return fmt.Errorf("database: schema version: %w", err)
	}
	if have == nil || int(*have) < want {
		return ErrNotMigrated
	}
	return nil
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// runner holds what the scenarios share.
type runner struct {
	cfg    Config
	sizes  Sizes
	report *Report

	// syncerDrainRate is the drain's rows/s, reused by the recipe's
	// comparison when the drain ran in the same invocation.
	syncerDrainRate float64
	// jobLockWaitRow is the index of job economy's lock-wait row, whose
	// baseline the recipe fills in; 0 when it did not run.
	jobLockWaitRow int
	// noCheckpoint notes once that the role may not checkpoint.
	noCheckpoint sync.Once
}

func (r *runner) progressf(format string, args ...any) {
	fmt.Fprintf(r.cfg.Progress, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

func (r *runner) note(format string, args ...any) {
	r.report.Notes = append(r.report.Notes, fmt.Sprintf(format, args...))
}

// schemaURL returns the database URL with search_path set to schema and
// sessions tagged with its name (empty: the URL as given).
func (r *runner) schemaURL(schema string) (string, error) {
	u, err := url.Parse(r.cfg.DatabaseURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", errors.New("bench: the database URL must be a postgres:// URL")
	}
	if schema == "" {
		return u.String(), nil
	}
	q := u.Query()
	q.Set("search_path", schema)
	q.Set("application_name", schema)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func (r *runner) connect(ctx context.Context, schema string) (*pgx.Conn, error) {
	dsn, err := r.schemaURL(schema)
	if err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("bench: connect: %w", err)
	}
	return conn, nil
}

func (r *runner) pool(ctx context.Context, schema string, maxConns int32) (*pgxpool.Pool, error) {
	dsn, err := r.schemaURL(schema)
	if err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("bench: pool config: %w", err)
	}
	pc.MaxConns = maxConns
	p, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("bench: pool: %w", err)
	}
	return p, nil
}

// stack is a scratch schema with a fake third party and a running daemon on
// it: what most scenarios start from.
type stack struct {
	s *scratch
	f *fake
	d *daemon
}

// startStack starts a stack; close tears it down in reverse order.
func (r *runner) startStack(ctx context.Context, label string) (*stack, error) {
	s, err := r.newScratch(ctx, label, false)
	if err != nil {
		return nil, err
	}
	f, err := startFake(0)
	if err != nil {
		s.drop(ctx)
		return nil, err
	}
	d, err := r.startDaemon(ctx, s, f, false)
	if err != nil {
		f.close()
		s.drop(ctx)
		return nil, err
	}
	return &stack{s: s, f: f, d: d}, nil
}

func (st *stack) close(ctx context.Context) {
	_ = st.d.stop()
	st.f.close()
	st.s.drop(ctx)
}

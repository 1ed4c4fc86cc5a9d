package verify

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/syncer-dev/syncer/internal/database"
)

// The states of a source's last run (syncer_verify_last.state).
const (
	StateRequested   = "requested"
	StateRunning     = "running"
	StateFinished    = "finished"
	StateFailed      = "failed"
	StateInterrupted = "interrupted"
)

// Who started a run (syncer_verify_last.by_whom).
const (
	ByCommand    = "command"
	ByBackground = "background"
	ByConsole    = "console"
)

// errorTextMax bounds the error kept: a line for status, never a body.
const errorTextMax = 300

// Counts are a finished run's counts by kind, as syncer_verify_last
// keeps them.
type Counts struct {
	KindCounts
	Healed int64 `json:"healed"`
}

// ByKind returns the drift kinds' counts, for the metrics.
func (c *Counts) ByKind() map[Kind]int64 {
	return map[Kind]int64{Missing: c.Missing, Stale: c.Stale, Zombie: c.Zombie, Failed: c.Failed, Unknown: c.Unknown}
}

func countsOf(r *Result) Counts { return Counts{KindCounts: r.KindCounts, Healed: r.Healed} }

// Last is a source's last verify, as status and the console show it.
type Last struct {
	Source string `json:"-"`
	// State is running, finished, failed, interrupted or requested.
	State string `json:"state"`
	// By says who started it: command, background or console.
	By         string     `json:"by,omitempty"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// Counts are the last finished run's; nil before one finished. They
	// stay while the next run is under way.
	Counts *Counts `json:"counts,omitempty"`
	// Error says why the last run failed.
	Error       string     `json:"error,omitempty"`
	RequestedAt *time.Time `json:"requested_at,omitempty"`
}

// Requested reports whether someone asked for a run after the last one
// started.
func (l *Last) Requested() bool {
	return l.RequestedAt != nil && (l.StartedAt == nil || l.RequestedAt.After(*l.StartedAt))
}

// LastRuns returns every source's last verify, by source.
func LastRuns(ctx context.Context, q database.Querier) (map[string]*Last, error) {
	rows, err := q.Query(ctx, `SELECT source, state, by_whom, started_at, finished_at, counts, error, requested_at
		FROM syncer_verify_last`)
	if err != nil {
		return nil, fmt.Errorf("verify: read last runs: %w", err)
	}
	defer rows.Close()
	out := map[string]*Last{}
	for rows.Next() {
		var l Last
		var counts []byte
		if err := rows.Scan(&l.Source, &l.State, &l.By, &l.StartedAt, &l.FinishedAt, &counts, &l.Error, &l.RequestedAt); err != nil {
			return nil, fmt.Errorf("verify: read last runs: %w", err)
		}
		if counts != nil {
			l.Counts = &Counts{}
			if err := json.Unmarshal(counts, l.Counts); err != nil {
				return nil, fmt.Errorf("verify: read last run of %s: %w", l.Source, err)
			}
		}
		out[l.Source] = &l
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("verify: read last runs: %w", err)
	}
	return out, nil
}

// Request asks the running daemons to verify source now (the console's
// "Verify now"): the daemon whose loop sees it first runs it.
func Request(ctx context.Context, q database.Querier, source string) error {
	_, err := q.Exec(ctx, `INSERT INTO syncer_verify_last (source, state, requested_at) VALUES ($1, 'requested', now())
		ON CONFLICT (source) DO UPDATE SET requested_at = now(),
			state = CASE WHEN syncer_verify_last.state = 'running' THEN 'running' ELSE 'requested' END`, source)
	if err != nil {
		return fmt.Errorf("verify: request a run of %s: %w", source, err)
	}
	return nil
}

// started records that a run of source began.
func started(ctx context.Context, q database.Querier, source, by string) error {
	_, err := q.Exec(ctx, `INSERT INTO syncer_verify_last (source, state, by_whom, started_at) VALUES ($1, 'running', $2, now())
		ON CONFLICT (source) DO UPDATE SET state = 'running', by_whom = $2, started_at = now(), error = ''`, source, by)
	if err != nil {
		return fmt.Errorf("verify: record the start of %s: %w", source, err)
	}
	return nil
}

// ended records how a run of source ended: its counts when it finished,
// its error otherwise.
func ended(ctx context.Context, q database.Querier, source, state string, res *Result, runErr error) error {
	var counts []byte
	if state == StateFinished && res != nil {
		var err error
		if counts, err = json.Marshal(countsOf(res)); err != nil {
			return err
		}
	}
	text := ""
	if runErr != nil {
		text = runErr.Error()
		if len(text) > errorTextMax {
			text = text[:errorTextMax] + "…"
		}
	}
	_, err := q.Exec(ctx, `UPDATE syncer_verify_last SET state = $2, error = $3,
		finished_at = CASE WHEN $2 = 'finished' THEN now() ELSE finished_at END,
		counts = COALESCE($4::jsonb, counts)
		WHERE source = $1`, source, state, text, counts)
	if err != nil {
		return fmt.Errorf("verify: record the end of %s: %w", source, err)
	}
	return nil
}

// Text is the last run in one line, as status and the console print it.
func (l *Last) Text() string {
	at := func(t *time.Time) string {
		if t == nil {
			return "?"
		}
		return t.UTC().Format(time.RFC3339)
	}
	counts := "no run finished yet"
	if c := l.Counts; c != nil {
		counts = fmt.Sprintf("last finished %s: %d checked, %d ok, %d missing, %d stale, %d zombie, %d failed, %d unknown, %d pending",
			at(l.FinishedAt), c.Checked, c.OK, c.Missing, c.Stale, c.Zombie, c.Failed, c.Unknown, c.Pending)
		if c.Healed > 0 {
			counts += fmt.Sprintf(", %d healed", c.Healed)
		}
		if c.Drifted() > 0 {
			counts += ": DRIFT"
		}
	}
	switch l.State {
	case StateRunning:
		return fmt.Sprintf("running since %s (%s); %s", at(l.StartedAt), l.By, counts)
	case StateFailed:
		return fmt.Sprintf("FAILED (started %s by %s): %s; %s", at(l.StartedAt), l.By, l.Error, counts)
	case StateInterrupted:
		return fmt.Sprintf("interrupted (started %s by %s), resumes where it stopped; %s", at(l.StartedAt), l.By, counts)
	case StateRequested:
		return fmt.Sprintf("requested %s, a daemon starts it; %s", at(l.RequestedAt), counts)
	}
	if l.Requested() {
		return fmt.Sprintf("requested %s, a daemon starts it; %s", at(l.RequestedAt), counts)
	}
	return fmt.Sprintf("%s (%s)", counts, l.By)
}

// refused records that a run of source asked for cannot run, and why.
func refused(ctx context.Context, q database.Querier, source, why string) error {
	_, err := q.Exec(ctx, `UPDATE syncer_verify_last SET state = 'failed', started_at = now(), by_whom = 'console', error = $2
		WHERE source = $1`, source, why)
	if err != nil {
		return fmt.Errorf("verify: record the refusal of %s: %w", source, err)
	}
	return nil
}

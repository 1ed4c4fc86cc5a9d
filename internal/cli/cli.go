// Package cli is syncer's command line: one small type per command, each
// with its flags (every flag also an environment variable; a flag wins), a
// Validate that names the bad flag, and output to injected writers so tests
// can run a command and read what it printed.
//
// Exit status: 0 done; 2 a usage or configuration error, with one line naming
// the flag or variable; 1 any other failure, with one line saying what
// failed. No stack trace for an expected error.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/alecthomas/kong"
	"golang.org/x/term"
)

// CLI is the root of the command tree.
type CLI struct {
	LogFormat string `name:"log-format" env:"SYNCER_LOG_FORMAT" enum:"auto,text,json" default:"auto" help:"Log format: text on a terminal and JSON otherwise when auto."`
	LogLevel  string `name:"log-level" env:"SYNCER_LOG_LEVEL" enum:"debug,info,warn,error" default:"info" help:"Lowest level logged (debug shows one line per batch)."`

	Migrate        MigrateCmd        `cmd:"" help:"Bring the database to the current schema (River's and syncer's). Idempotent."`
	Run            RunCmd            `cmd:"" help:"Run the daemon: relay outbox events into River jobs and export, until SIGTERM or SIGINT."`
	Replay         ReplayCmd         `cmd:"" help:"Re-export a range of rows whatever their synced_at. Running daemons do the work."`
	Status         StatusCmd         `cmd:"" help:"Show counts and health."`
	RetryFailed    RetryFailedCmd    `cmd:"" name:"retry-failed" help:"Make failed rows eligible for export again."`
	FakeThirdparty FakeThirdpartyCmd `cmd:"" name:"fake-thirdparty" help:"Serve a local stand-in for the third-party API, with fault knobs."`
	Bench          BenchCmd          `cmd:"" help:"Measure throughput, latency, writer overhead and memory against baselines from the same run."`
}

// Env is what a command gets besides its flags.
type Env struct {
	Stdout io.Writer
	Stderr io.Writer
	// Logger logs to Stderr in the chosen format.
	Logger *slog.Logger
	// IsTerminal reports whether Stdout is a terminal.
	IsTerminal bool
}

// usageError marks a configuration error: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// usagef returns a usage error naming the flag and its variable.
func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

type exitPanic int

// Main runs the command line and returns the exit status.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) (code int) {
	var root CLI
	defer func() {
		if r := recover(); r != nil {
			if c, ok := r.(exitPanic); ok {
				code = int(c)
				return
			}
			panic(r)
		}
	}()
	parser, err := kong.New(&root,
		kong.Name("syncer"),
		kong.Description("Exports rows of the resources table to a third-party HTTP API, exactly as often as it must."),
		kong.Writers(stdout, stderr),
		kong.Exit(func(c int) { panic(exitPanic(c)) }),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
	)
	if err != nil {
		fmt.Fprintf(stderr, "syncer: %v\n", err)
		return 1
	}
	kctx, err := parser.Parse(args)
	if err != nil {
		fmt.Fprintf(stderr, "syncer: %s\n", oneLine(err.Error()))
		return 2
	}
	env := &Env{Stdout: stdout, Stderr: stderr, IsTerminal: isTerminal(stdout)}
	env.Logger = newLogger(stderr, root.LogFormat, root.LogLevel)
	kctx.BindTo(ctx, (*context.Context)(nil))
	kctx.Bind(env)
	if err := kctx.Run(); err != nil {
		var ue *usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "syncer: %s\n", oneLine(ue.msg))
			return 2
		}
		fmt.Fprintf(stderr, "syncer: %s: %s\n", kctx.Command(), oneLine(err.Error()))
		return 1
	}
	return 0
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func newLogger(w io.Writer, format, level string) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(level))
	opts := &slog.HandlerOptions{Level: lvl}
	if format == "text" || (format == "auto" && isTerminal(w)) {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// DB holds the database setting shared by commands that need one.
type DB struct {
	DatabaseURL string `name:"database-url" env:"DATABASE_URL" help:"PostgreSQL URL, e.g. postgres://user@host:5432/db. Never logged with its password."`
}

// Validate names the missing setting.
func (d *DB) Validate() error {
	if d.DatabaseURL == "" {
		return usagef("--database-url (DATABASE_URL) is required")
	}
	return nil
}

package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Size names a set of Sizes.
const (
	SizeDefault = "default"
	SizeTiny    = "tiny"
)

// Scenario names, as --only takes them, in the order they run.
const (
	ScenarioDrain          = "drain"
	ScenarioLatency        = "latency"
	ScenarioWriterOverhead = "writer-overhead"
	ScenarioMemory         = "memory"
	ScenarioMemoryLimit    = "memory-limit"
	ScenarioJobEconomy     = "job-economy"
	ScenarioRecipe         = "recipe"
	ScenarioDeletes        = "deletes"
	ScenarioSlowAPI        = "slow-api"
	ScenarioUnknownLimit   = "unknown-limit"
	ScenarioQuota          = "quota"
	ScenarioSources        = "sources"
	ScenarioColdStart      = "cold-start"
	ScenarioFastLimit      = "fast-limit"
	ScenarioRestart        = "restart"
	ScenarioHandover       = "handover"
	// The destination formats (issue 21).
	ScenarioCloudEventsDrain   = "cloudevents-drain"
	ScenarioElasticsearchDrain = "elasticsearch-drain"
	ScenarioCustomDrain        = "custom-drain"
	ScenarioWebhooks           = "webhooks"
	// The console (issue 30).
	ScenarioConsole = "console"
	// Tables as applications shape them (issue 29).
	ScenarioShapes = "shapes"
	// Commit to receipt at steady rates (issue 32).
	ScenarioReceipt = "receipt"
	// Tenants: limits, fairness, idle cost, the column's cost (issue 43).
	ScenarioTenants = "tenants"
	// What the rows' story costs the drain and a lookup (issue 45).
	ScenarioHistory = "history"
)

// Scenarios lists every scenario in the order they run.
var Scenarios = []string{
	ScenarioDrain, ScenarioLatency, ScenarioWriterOverhead,
	ScenarioMemory, ScenarioMemoryLimit, ScenarioJobEconomy, ScenarioRecipe,
	ScenarioDeletes, ScenarioSlowAPI, ScenarioUnknownLimit, ScenarioQuota,
	ScenarioSources,
	ScenarioColdStart, ScenarioFastLimit, ScenarioRestart, ScenarioHandover,
	ScenarioCloudEventsDrain, ScenarioElasticsearchDrain, ScenarioCustomDrain, ScenarioWebhooks,
	ScenarioConsole, ScenarioShapes, ScenarioReceipt,
	ScenarioTenants,
	ScenarioVerify,
	ScenarioHistory,
	ScenarioDBShare,
	ScenarioSessions,
	ScenarioPooler,
}

// rowNames are the rows each scenario adds to the table.
var rowNames = map[string][]string{
	ScenarioDrain:              {"drain"},
	ScenarioLatency:            {"latency"},
	ScenarioWriterOverhead:     {"writer overhead", "writers, daemon running"},
	ScenarioMemory:             {"memory (small)", "memory (large)"},
	ScenarioMemoryLimit:        {memoryLimitRow300, memoryLimitRow8K},
	ScenarioJobEconomy:         {"job economy: jobs", "job economy: lock wait"},
	ScenarioRecipe:             {"recipe: drain", "recipe: burst export", "recipe: burst writers"},
	ScenarioDeletes:            {"delete overhead", "writers, no daemon", "tombstone drain"},
	ScenarioSlowAPI:            {"slow API"},
	ScenarioUnknownLimit:       {"unknown limit"},
	ScenarioQuota:              {"advertised quota"},
	ScenarioSources:            {"source writers", "unexported writers", "source drain", "two sources"},
	ScenarioCloudEventsDrain:   {"cloudevents drain"},
	ScenarioElasticsearchDrain: {"elasticsearch drain"},
	ScenarioCustomDrain:        {"custom drain"},
	ScenarioWebhooks:           {"webhooks"},
	ScenarioConsole:            {"console"},
	ScenarioShapes:             {"source writers", "filtered writers", "source drain", "composite drain"},
	ScenarioColdStart:          {"cold start"},
	ScenarioFastLimit:          {"fast limit"},
	ScenarioRestart:            {"restart"},
	ScenarioHandover:           {"handover"},
	ScenarioReceipt:            receiptRows(),
	ScenarioTenants:            {"tenants: unannounced limits", "tenants: unannounced sustained", "tenants: rate_limit 5", "tenants: two daemons", "tenants: a daemon joins", "tenants: fairness", "tenants: idle", "tenants: column cost", "tenants: own limits sharing lanes", "tenants: own limits from the query"},
	ScenarioVerify:             verifyRows,
	ScenarioHistory:            {"history drain", "history lookup"},
	ScenarioDBShare:            {dbshareRow500, dbshareRow2000, dbshareRowDrain},
	ScenarioSessions:           {sessionsIdleRow, sessionsLoadRow},
	ScenarioPooler:             {poolerRow},
}

// RowNames returns the names of the rows a run of scenarios prints, in order.
func RowNames(scenarios []string) []string {
	var out []string
	for _, s := range Scenarios {
		if slices.Contains(scenarios, s) {
			out = append(out, rowNames[s]...)
		}
	}
	return out
}

// Sizes are the amounts each scenario works on.
type Sizes struct {
	DrainRows         int
	DrainRepeats      int
	BatchSize         int
	LatencyRate       int
	LatencyFor        time.Duration
	OverheadFor       time.Duration
	Writers           int
	MemorySmallRows   int
	MemoryLargeRows   int
	JobEconomyInserts int
	RecipeDrainRows   int
	RecipeDrainJobs   int
	BurstInserts      int
	// MemLimitRows300 and MemLimitRows8K are the rows drained with
	// 300-byte and 8 KiB payloads by the memory-limit scenario.
	MemLimitRows300 int
	MemLimitRows8K  int
}

// SizesFor returns the sizes named by size.
func SizesFor(size string) (Sizes, error) {
	switch size {
	case SizeDefault, "":
		return Sizes{
			DrainRows: 200_000, DrainRepeats: 3, BatchSize: 500,
			LatencyRate: 500, LatencyFor: 20 * time.Second,
			OverheadFor: 10 * time.Second, Writers: 8,
			MemorySmallRows: 100_000, MemoryLargeRows: 1_000_000,
			MemLimitRows300: 100_000, MemLimitRows8K: 20_000,
			JobEconomyInserts: 10_000,
			RecipeDrainRows:   200_000, RecipeDrainJobs: 2_000,
			BurstInserts: 2_000,
		}, nil
	case SizeTiny:
		return Sizes{
			DrainRows: 3_000, DrainRepeats: 1, BatchSize: 500,
			LatencyRate: 200, LatencyFor: time.Second,
			OverheadFor: 500 * time.Millisecond, Writers: 8,
			MemorySmallRows: 2_000, MemoryLargeRows: 20_000,
			MemLimitRows300: 2_000, MemLimitRows8K: 400,
			JobEconomyInserts: 200,
			RecipeDrainRows:   3_000, RecipeDrainJobs: 30,
			BurstInserts: 50,
		}, nil
	}
	return Sizes{}, fmt.Errorf("bench: unknown size %q (want %s or %s)", size, SizeDefault, SizeTiny)
}

// DatabaseURLDefault is the database `syncer-lab bench` works in unless told
// otherwise: the local test database, never the one DATABASE_URL names.
const DatabaseURLDefault = "postgres://127.0.0.1:5432/test"

// Config configures a run.
type Config struct {
	// DatabaseURL is a postgres:// URL of the database to work in. Scratch
	// schemas are created in it and dropped. Required.
	DatabaseURL string
	// Size is SizeDefault or SizeTiny. Defaults to SizeDefault.
	Size string
	// Only limits the run to these scenarios. Defaults to all of Scenarios.
	Only []string
	// Rows limits the run to the rows whose names hold one of these
	// (case-insensitive): the tenants scenario then runs only the steps
	// that measure them; other scenarios run whole. Defaults to every row.
	Rows []string
	// Binary is the syncer executable run as the daemon. Required.
	Binary string
	// Lab is the syncer-lab executable run as the bench's helper processes
	// (the plain client and poller its baselines measure). Defaults to
	// os.Executable(), the lab running the bench.
	Lab string
	// ProfileDir, if set, runs the drain's daemon (and the tenants' own
	// limits rows' daemons, tenants-own-*.cpu.pprof) with --pprof and saves a
	// CPU profile of its drain there as drain.cpu.pprof. Defaults to "", no
	// profile.
	ProfileDir string
	// MigrateWithBinary has Binary migrate each scratch schema (`syncer
	// migrate`, with --config where a scenario installs sources) instead
	// of the lab's own migrations: a binary built at another commit runs
	// on the schema it makes for itself. Defaults to false.
	MigrateWithBinary bool
	// DaemonOnly skips the baselines a comparison of two daemons does not
	// read (the drain's database bound) and runs the drain once: the
	// comparison's alternations are its repeats. Defaults to false.
	DaemonOnly bool
	// TenantScale scales the tenants scenario's sizes (tenants, rows,
	// durations; 1 is the targets' sizes) for a quick run. Defaults to 0:
	// 1, or 0.05 at SizeTiny.
	TenantScale float64
	// Progress receives a line as each step starts. Defaults to discarding.
	Progress io.Writer
	// Logger logs the bench's own warnings. Defaults to discarding.
	Logger *slog.Logger
}

func (c *Config) validate() error {
	if c.DatabaseURL == "" {
		return errors.New("bench: Config.DatabaseURL is required")
	}
	for _, s := range c.Only {
		if !slices.Contains(Scenarios, s) {
			return fmt.Errorf("bench: Config.Only: unknown scenario %q (want one of %s)", s, strings.Join(Scenarios, ", "))
		}
	}
	only := c.Only
	if len(only) == 0 {
		only = Scenarios
	}
	for _, want := range c.Rows {
		if !slices.ContainsFunc(RowNames(only), func(row string) bool { return rowMatches(row, want) }) {
			return fmt.Errorf("bench: Config.Rows: no row of the scenarios run holds %q", want)
		}
	}
	return nil
}

// wantsRow reports whether the row named row is to be measured.
func (c *Config) wantsRow(row string) bool {
	return len(c.Rows) == 0 || slices.ContainsFunc(c.Rows, func(want string) bool { return rowMatches(row, want) })
}

func rowMatches(row, want string) bool {
	return strings.Contains(strings.ToLower(row), strings.ToLower(want))
}

// Machine describes where the run happened.
type Machine struct {
	CPUs       int    `json:"cpus"`
	GoVersion  string `json:"go_version"`
	PostgreSQL string `json:"postgresql"`
}

// Row is one line of the table.
type Row struct {
	Scenario string `json:"scenario"`
	// Measured is syncer's result; Baseline the comparison measured in the
	// same run; Figure the ratio or figure the target applies to.
	Measured string `json:"measured"`
	Baseline string `json:"baseline"`
	Figure   string `json:"figure"`
	Target   string `json:"target"`
	Pass     bool   `json:"pass"`
	// Error is set when the scenario could not be measured.
	Error string `json:"error,omitempty"`
	// Values holds the raw numbers behind the strings.
	Values map[string]float64 `json:"values,omitempty"`
}

// Report is the outcome of a run.
type Report struct {
	Machine   Machine   `json:"machine"`
	Size      string    `json:"size"`
	StartedAt time.Time `json:"started_at"`
	Took      string    `json:"took"`
	Rows      []Row     `json:"rows"`
	// Notes are observations worth reading with the table.
	Notes []string `json:"notes,omitempty"`
}

// Failed reports whether some scenario could not be measured.
func (r *Report) Failed() bool {
	return slices.ContainsFunc(r.Rows, func(row Row) bool { return row.Error != "" })
}

// Run runs the scenarios and returns the report. A scenario that fails is
// reported in its rows; Run returns an error only when it cannot start.
func Run(ctx context.Context, cfg *Config) (*Report, error) {
	r, err := newRunner(ctx, cfg)
	if err != nil {
		return nil, err
	}
	rep := r.report
	for _, name := range Scenarios {
		if !slices.Contains(r.cfg.Only, name) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		rep.Rows = append(rep.Rows, r.runScenario(ctx, name)...)
	}
	if r.cfg.Size == SizeTiny {
		rep.Notes = append(rep.Notes, "size tiny: every scenario ran at 1-2% of its size; the figures say the code works, not how fast it is")
	}
	rep.Took = time.Since(rep.StartedAt).Round(time.Second).String()
	return rep, nil
}

// newRunner checks cfg, applies its defaults and returns a runner with an
// empty report.
func newRunner(ctx context.Context, cfg *Config) (*runner, error) {
	c := *cfg
	if err := c.validate(); err != nil {
		return nil, err
	}
	if c.Size == "" {
		c.Size = SizeDefault
	}
	sizes, err := SizesFor(c.Size)
	if err != nil {
		return nil, err
	}
	if c.DaemonOnly {
		// The alternations of a comparison are its repeats.
		sizes.DrainRepeats = 1
	}
	if len(c.Only) == 0 {
		c.Only = Scenarios
	}
	if c.Binary == "" {
		return nil, errors.New("bench: Config.Binary is required")
	}
	if c.Lab == "" {
		if c.Lab, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("bench: find the syncer-lab binary: %w", err)
		}
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	r := &runner{cfg: c, sizes: sizes}
	rep := &Report{Size: c.Size, StartedAt: time.Now()}
	rep.Machine, err = r.machine(ctx)
	if err != nil {
		return nil, err
	}
	r.report = rep
	return r, nil
}

// runScenario runs one scenario and returns its rows. A scenario that
// fails keeps what it measured; its other rows carry the error, so the
// table still has every row.
func (r *runner) runScenario(ctx context.Context, name string) []Row {
	steps := map[string]func(context.Context) ([]Row, error){
		ScenarioDrain:              r.drain,
		ScenarioLatency:            r.latency,
		ScenarioWriterOverhead:     r.writerOverhead,
		ScenarioMemory:             r.memory,
		ScenarioMemoryLimit:        r.memoryLimit,
		ScenarioJobEconomy:         r.jobEconomy,
		ScenarioRecipe:             r.recipe,
		ScenarioDeletes:            r.deletes,
		ScenarioSlowAPI:            r.slowAPI,
		ScenarioUnknownLimit:       r.unknownLimit,
		ScenarioQuota:              r.advertisedQuota,
		ScenarioSources:            r.sourcesScenario,
		ScenarioColdStart:          r.coldStart,
		ScenarioFastLimit:          r.fastLimit,
		ScenarioRestart:            r.restart,
		ScenarioHandover:           r.handover,
		ScenarioCloudEventsDrain:   r.cloudEventsDrain,
		ScenarioElasticsearchDrain: r.elasticsearchDrain,
		ScenarioCustomDrain:        r.customDrain,
		ScenarioWebhooks:           r.webhooks,
		ScenarioConsole:            r.consoleScenario,
		ScenarioShapes:             r.shapesScenario,
		ScenarioReceipt:            r.receipt,
		ScenarioTenants:            r.tenantsScenario,
		ScenarioVerify:             r.verifyScenario,
		ScenarioHistory:            r.historyScenario,
		ScenarioDBShare:            r.dbshare,
		ScenarioSessions:           r.sessionsScenario,
		ScenarioPooler:             r.poolerScenario,
	}
	r.progressf("== %s", name)
	rows, err := steps[name](ctx)
	if err != nil {
		have := map[string]bool{}
		for _, row := range rows {
			have[row.Scenario] = true
		}
		for _, row := range rowNames[name] {
			if !have[row] && r.cfg.wantsRow(row) {
				rows = append(rows, Row{Scenario: row, Measured: "-", Baseline: "-", Figure: "-", Target: "-", Error: err.Error()})
			}
		}
		r.progressf("   %s failed: %v", name, err)
	}
	return rows
}

// machine describes the machine and the database.
func (r *runner) machine(ctx context.Context) (Machine, error) {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	conn, err := r.connect(ctx, "")
	if err != nil {
		return m, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&m.PostgreSQL); err != nil {
		return m, fmt.Errorf("bench: server version: %w", err)
	}
	return m, nil
}

// WriteTable prints the report for a terminal.
func (r *Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "machine: %d CPUs, %s, PostgreSQL %s; size %s; took %s\n\n",
		r.Machine.CPUs, r.Machine.GoVersion, r.Machine.PostgreSQL, r.Size, r.Took)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tMEASURED (syncer)\tBASELINE (same run)\tFIGURE\tTARGET\tRESULT")
	for _, row := range r.Rows {
		res := "pass"
		if !row.Pass {
			res = "FAIL"
		}
		if row.Error != "" {
			res = "ERROR"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", row.Scenario, row.Measured, row.Baseline, row.Figure, row.Target, res)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, row := range r.Rows {
		if row.Error != "" {
			fmt.Fprintf(w, "\nerror in %s: %s", row.Scenario, row.Error)
		}
	}
	if len(r.Notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range r.Notes {
			fmt.Fprintf(w, "\nnote: %s", n)
		}
	}
	_, err := fmt.Fprintln(w)
	return err
}

// WriteJSON writes the report as one JSON object.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

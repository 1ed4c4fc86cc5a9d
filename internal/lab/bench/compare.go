package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// CompareScenarios are the scenarios a comparison runs unless told
// otherwise: the push path's speed, its latency, its memory, a slow third
// party, the configured sources and the tenants. The others take long and
// run with CompareConfig.Only (or --all).
var CompareScenarios = []string{ScenarioDrain, ScenarioLatency, ScenarioMemory, ScenarioSlowAPI, ScenarioSources, ScenarioTenants}

// CompareRoundsDefault is how many times each scenario runs on each side.
const CompareRoundsDefault = 3

// CompareFall is the share by which a figure may be worse than the other
// binary's before the comparison names it: timings on a shared machine
// move by several percent from run to run.
const CompareFall = 0.10

// Side is one binary of a comparison.
type Side struct {
	// Name labels the side in the table ("3cfe467", "this build").
	Name string
	// Binary is its syncer executable.
	Binary string
}

// CompareConfig configures Compare.
type CompareConfig struct {
	// Config is the run's settings; Binary, Only, ProfileDir,
	// MigrateWithBinary and DaemonOnly are set by Compare for each side.
	Config
	// Base is the binary compared with (the release, a ref); Head the one
	// under test. Both required.
	Base, Head Side
	// Rounds is how many times each scenario runs on each side, the two
	// alternated within a round and their order swapped from round to
	// round, so the machine's drift falls on both. Defaults to
	// CompareRoundsDefault.
	Rounds int
}

// Figure is one compared number of one row.
type Figure struct {
	Row  string `json:"row"`
	Name string `json:"figure"`
	// HigherBetter says which way is better.
	HigherBetter bool `json:"higher_better"`
	// Base and Head are each side's value in each round (NaN where the
	// round failed), BaseMedian and HeadMedian their medians.
	Base       []float64 `json:"base"`
	Head       []float64 `json:"head"`
	BaseMedian float64   `json:"base_median"`
	HeadMedian float64   `json:"head_median"`
	// Ratio is HeadMedian / BaseMedian.
	Ratio float64 `json:"ratio"`
	// Worse is set when Head is more than CompareFall worse than Base.
	Worse bool `json:"worse"`
	// Error is why a side has no value.
	Error string `json:"error,omitempty"`

	unit string
}

// Comparison is the outcome of Compare.
type Comparison struct {
	Machine   Machine   `json:"machine"`
	Size      string    `json:"size"`
	Base      Side      `json:"base"`
	Head      Side      `json:"head"`
	Rounds    int       `json:"rounds"`
	StartedAt time.Time `json:"started_at"`
	Took      string    `json:"took"`
	Figures   []Figure  `json:"figures"`
	// Runs are each side's rows of each round, as the bench prints them.
	Runs map[string][][]Row `json:"runs"`
}

// Worse returns the figures that fell more than CompareFall.
func (c *Comparison) Worse() []Figure {
	var out []Figure
	for _, f := range c.Figures {
		if f.Worse {
			out = append(out, f)
		}
	}
	return out
}

// figureSpec names a value of a row's Values and which way is better.
type figureSpec struct {
	key, name, unit string
	higherBetter    bool
}

// compareFigures are the figures compared for each row. A row not listed
// is compared on its rows_per_s, else on its ratio (both higher is
// better).
var compareFigures = map[string][]figureSpec{
	"drain": {
		{"rows_per_s", "rows/s", "", true},
		{"cpu_us_per_row", "daemon CPU µs/row", "", false},
		{"peak_rss_bytes", "peak RSS", "MiB", false},
		{"alloc_bytes_per_row", "allocated B/row", "", false},
		{"gc_cycles", "GC cycles", "", false},
	},
	"latency": {
		{"p50_ms", "p50 ms", "", false},
		{"p99_ms", "p99 ms", "", false},
	},
	"memory (small)": {{"peak_rss_bytes", "peak RSS", "MiB", false}, {"rows_per_s", "rows/s", "", true}},
	"memory (large)": {{"peak_rss_bytes", "peak RSS", "MiB", false}, {"rows_per_s", "rows/s", "", true}},
	"slow API":       {{"rows_per_s", "rows/s", "", true}},
	// The writers' rows are ratios to plain writers of the same run:
	// steadier than their inserts/s, which move with the disk.
	"source writers":              {{"ratio", "x plain writers", "", true}},
	"unexported writers":          {{"ratio", "x plain writers", "", true}},
	"tenants: fairness":           {{"p99_ms", "small tenant p99 ms", "", false}},
	"tenants: idle":               {{"cpu_s", "CPU s", "", false}},
	"tenants: a daemon joins":     {{"took_s", "s to send", "", false}},
	"tenants: two daemons":        {{"took_s", "s", "", false}},
	"tenants: unannounced limits": {{"ratio", "x allowed", "", true}},
	// Each tenant against its own limit: the slowest is the row's
	// target (>= 0.9x), the median says whether the rest moved.
	ownSharedRow: ownFigures,
	ownQueryRow:  ownFigures,
	// The database's share: syncer's CPU a row against the WAL reader's
	// of the same run (lower is better), its writers' and its sessions'
	// shares, and the writers' rate.
	dbshareRow500:   dbshareFigures,
	dbshareRow2000:  dbshareFigures,
	dbshareRowDrain: {{"db_cpu_us_per_row", "database µs/row", "", false}, {"syncer_sessions_us_per_row", "sessions µs/row", "", false}},
}

var ownFigures = []figureSpec{
	{"worst_ratio", "slowest tenant x own limit", "", true},
	{"median_ratio", "median tenant x own limit", "", true},
}

var dbshareFigures = []figureSpec{
	{"ratio", "x WAL reader", "", false},
	{"syncer_us_per_row", "database µs/row", "", false},
	{"syncer_writers_us_per_row", "writers µs/row", "", false},
	{"syncer_sessions_us_per_row", "sessions µs/row", "", false},
	{"syncer_rate", "writers rows/s", "", true},
}

func specsFor(row string, values map[string]float64) []figureSpec {
	if specs, ok := compareFigures[row]; ok {
		return specs
	}
	for _, key := range []string{"rows_per_s", "ratio"} {
		if _, ok := values[key]; ok {
			return []figureSpec{{key, strings.ReplaceAll(key, "_per_s", "/s"), "", true}}
		}
	}
	return nil
}

// Compare runs each chosen scenario for both binaries, alternated, Rounds
// times, and compares their figures. Each run has its own scratch schemas,
// migrated by its own binary. Compare returns an error only when it cannot
// start; a side's failed scenario shows in its figures.
func Compare(ctx context.Context, cfg *CompareConfig) (*Comparison, error) {
	if cfg.Base.Binary == "" || cfg.Head.Binary == "" {
		return nil, errors.New("bench: CompareConfig.Base and Head need a Binary each")
	}
	rounds := cfg.Rounds
	if rounds <= 0 {
		rounds = CompareRoundsDefault
	}
	only := cfg.Only
	if len(only) == 0 {
		only = CompareScenarios
	}
	sides := []Side{cfg.Base, cfg.Head}
	runners := make([]*runner, 2)
	for i, side := range sides {
		c := cfg.Config
		c.Binary, c.Only = side.Binary, only
		c.MigrateWithBinary, c.DaemonOnly = true, true
		r, err := newRunner(ctx, &c)
		if err != nil {
			return nil, err
		}
		runners[i] = r
	}
	cmp := &Comparison{
		Machine: runners[0].report.Machine, Size: runners[0].cfg.Size,
		Base: cfg.Base, Head: cfg.Head, Rounds: rounds, StartedAt: time.Now(),
		Runs: map[string][][]Row{cfg.Base.Name: make([][]Row, rounds), cfg.Head.Name: make([][]Row, rounds)},
	}
	for _, name := range Scenarios {
		if !slices.Contains(only, name) {
			continue
		}
		for round := range rounds {
			// Base first in even rounds, head first in odd ones.
			order := []int{0, 1}
			if round%2 == 1 {
				order = []int{1, 0}
			}
			for _, i := range order {
				if err := ctx.Err(); err != nil {
					return cmp, err
				}
				r := runners[i]
				r.progressf("== %s: %s, round %d/%d", name, sides[i].Name, round+1, rounds)
				if cfg.ProfileDir != "" {
					r.cfg.ProfileDir = filepath.Join(cfg.ProfileDir, fmt.Sprintf("%s-%d", fileSafe(sides[i].Name), round+1))
				}
				rows := r.runScenario(ctx, name)
				cmp.Runs[sides[i].Name][round] = append(cmp.Runs[sides[i].Name][round], rows...)
			}
		}
	}
	cmp.Figures = compareRuns(cmp.Runs[cfg.Base.Name], cmp.Runs[cfg.Head.Name])
	cmp.Took = time.Since(cmp.StartedAt).Round(time.Second).String()
	return cmp, nil
}

// compareRuns pairs the rows of each side's rounds by name and compares
// their figures.
func compareRuns(base, head [][]Row) []Figure {
	var names []string
	for _, runs := range [][][]Row{base, head} {
		for _, rows := range runs {
			for _, row := range rows {
				if !slices.Contains(names, row.Scenario) {
					names = append(names, row.Scenario)
				}
			}
		}
	}
	var out []Figure
	for _, name := range names {
		bv, berr := rowValues(base, name)
		hv, herr := rowValues(head, name)
		var specs []figureSpec
		for _, v := range append(slices.Clone(hv), bv...) {
			if v != nil {
				specs = specsFor(name, v)
				break
			}
		}
		if specs == nil {
			// A row measured with no figure to compare is said, not
			// dropped: a comparison that prints nothing for a row it
			// ran reads as a row with nothing worse.
			f := Figure{Row: name, Name: "-", Ratio: math.NaN(), BaseMedian: math.NaN(), HeadMedian: math.NaN()}
			f.Error = errorOf(berr, herr)
			if f.Error == "" && slices.ContainsFunc(append(slices.Clone(hv), bv...), func(v map[string]float64) bool { return v != nil }) {
				f.Error = "no figure of this row is compared (compareFigures)"
			}
			if f.Error != "" {
				out = append(out, f)
			}
			continue
		}
		for _, sp := range specs {
			f := Figure{Row: name, Name: sp.name, HigherBetter: sp.higherBetter, unit: sp.unit}
			f.Base, f.Head = pick(bv, sp.key), pick(hv, sp.key)
			f.BaseMedian, f.HeadMedian = medianOf(f.Base), medianOf(f.Head)
			f.Ratio = f.HeadMedian / f.BaseMedian
			f.Error = errorOf(berr, herr)
			switch {
			case math.IsNaN(f.Ratio) || math.IsInf(f.Ratio, 0):
			case sp.higherBetter:
				f.Worse = f.Ratio < 1-CompareFall
			default:
				f.Worse = f.Ratio > 1+CompareFall
			}
			out = append(out, f)
		}
	}
	return out
}

// rowValues returns the row's Values in each round (nil where it failed
// or did not run), with derived figures added, and the first error seen.
func rowValues(runs [][]Row, name string) ([]map[string]float64, string) {
	out := make([]map[string]float64, len(runs))
	var firstErr string
	for i, rows := range runs {
		for _, row := range rows {
			if row.Scenario != name {
				continue
			}
			if row.Error != "" {
				if firstErr == "" {
					firstErr = row.Error
				}
				continue
			}
			v := make(map[string]float64, len(row.Values)+1)
			for k, x := range row.Values {
				v[k] = x
			}
			if cpu, n := v["daemon_cpu_s"], v["rows"]; cpu > 0 && n > 0 {
				v["cpu_us_per_row"] = cpu / n * 1e6
			}
			out[i] = v
			break
		}
	}
	return out, firstErr
}

func pick(values []map[string]float64, key string) []float64 {
	out := make([]float64, len(values))
	for i, v := range values {
		x, ok := v[key]
		if !ok {
			x = math.NaN()
		}
		out[i] = x
	}
	return out
}

// medianOf is the median of the values that are not NaN (NaN if none).
func medianOf(xs []float64) float64 {
	var have []float64
	for _, x := range xs {
		if !math.IsNaN(x) {
			have = append(have, x)
		}
	}
	if len(have) == 0 {
		return math.NaN()
	}
	slices.Sort(have)
	if len(have)%2 == 0 {
		return (have[len(have)/2-1] + have[len(have)/2]) / 2
	}
	return have[len(have)/2]
}

func errorOf(base, head string) string {
	var parts []string
	if base != "" {
		parts = append(parts, "base: "+firstLine(base))
	}
	if head != "" {
		parts = append(parts, "head: "+firstLine(head))
	}
	return strings.Join(parts, "; ")
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

func fileSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == ' ' || r == ':' {
			return '_'
		}
		return r
	}, s)
}

// WriteTable prints the comparison for a terminal: each figure's medians,
// their ratio (head / base) and whether head is worse by more than
// CompareFall, then each round's values, then the figures that fell.
func (c *Comparison) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "machine: %d CPUs, %s, PostgreSQL %s; size %s; %d rounds, alternated; took %s\n",
		c.Machine.CPUs, c.Machine.GoVersion, c.Machine.PostgreSQL, c.Size, c.Rounds, c.Took)
	fmt.Fprintf(w, "base: %s (%s)\nhead: %s (%s)\n\n", c.Base.Name, c.Base.Binary, c.Head.Name, c.Head.Binary)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "ROW\tFIGURE\t%s\t%s\tHEAD/BASE\tVERDICT\tROUNDS (base | head)\n", strings.ToUpper(c.Base.Name), strings.ToUpper(c.Head.Name))
	for _, f := range c.Figures {
		if f.Name == "-" {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\tERROR\t%s\n", f.Row, f.Error)
			continue
		}
		verdict := verdictOf(f)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s | %s\n", f.Row, f.Name,
			f.format(f.BaseMedian), f.format(f.HeadMedian), ratioString(f.Ratio), verdict,
			f.formatAll(f.Base), f.formatAll(f.Head))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, f := range c.Figures {
		if f.Error != "" && f.Name != "-" {
			fmt.Fprintf(w, "\nerror in %s: %s", f.Row, f.Error)
		}
	}
	worse := c.Worse()
	if len(worse) == 0 {
		fmt.Fprintf(w, "\nno figure of %s is more than %.0f%% worse than %s's\n", c.Head.Name, 100*CompareFall, c.Base.Name)
		return nil
	}
	fmt.Fprintf(w, "\n%d figures of %s are more than %.0f%% worse than %s's:\n", len(worse), c.Head.Name, 100*CompareFall, c.Base.Name)
	for _, f := range worse {
		fmt.Fprintf(w, "  %s, %s: %s against %s (%s)\n", f.Row, f.Name, f.format(f.HeadMedian), f.format(f.BaseMedian), ratioString(f.Ratio))
	}
	return nil
}

func verdictOf(f Figure) string {
	switch {
	case math.IsNaN(f.Ratio) || math.IsInf(f.Ratio, 0):
		return "ERROR"
	case f.Worse:
		return "WORSE"
	}
	better := f.Ratio > 1+CompareFall
	if !f.HigherBetter {
		better = f.Ratio < 1-CompareFall
	}
	if better {
		return "better"
	}
	return "same"
}

func ratioString(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "-"
	}
	return fmt.Sprintf("%.2fx", x)
}

func (f Figure) format(x float64) string {
	switch {
	case math.IsNaN(x):
		return "-"
	case f.unit == "MiB":
		return fmt.Sprintf("%.1f MiB", x/(1<<20))
	case math.Abs(x) >= 1000:
		return count(x)
	case math.Abs(x) >= 10:
		return fmt.Sprintf("%.1f", x)
	}
	return fmt.Sprintf("%.3g", x)
}

func (f Figure) formatAll(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = f.format(x)
	}
	return strings.Join(parts, " ")
}

// WriteJSON writes the comparison as one JSON object.
func (c *Comparison) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(c)
}

// MarshalJSON writes a value a side has not (NaN) as null: JSON has no NaN.
func (f Figure) MarshalJSON() ([]byte, error) {
	type plain Figure
	out := struct {
		plain
		Base       []*float64 `json:"base"`
		Head       []*float64 `json:"head"`
		BaseMedian *float64   `json:"base_median"`
		HeadMedian *float64   `json:"head_median"`
		Ratio      *float64   `json:"ratio"`
	}{plain: plain(f), Base: nullable(f.Base...), Head: nullable(f.Head...)}
	out.BaseMedian, out.HeadMedian, out.Ratio = nullable(f.BaseMedian)[0], nullable(f.HeadMedian)[0], nullable(f.Ratio)[0]
	return json.Marshal(out)
}

func nullable(xs ...float64) []*float64 {
	out := make([]*float64, len(xs))
	for i, x := range xs {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			out[i] = &x
		}
	}
	return out
}

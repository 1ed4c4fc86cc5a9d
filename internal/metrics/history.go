package metrics

import "github.com/prometheus/client_golang/prometheus"

// History's block: the rows' story (internal/history), written by its
// writer after the marks commit. A daemon's entries written climb with its
// drain; its write errors are entries lost to the story (never to the
// export).

// History holds the story's series.
type History struct {
	// EntriesWritten counts the story's entries written.
	EntriesWritten prometheus.Counter
	// WriteErrors counts the story's writes that failed: their entries
	// are not in the story.
	WriteErrors prometheus.Counter
}

func newHistory(reg prometheus.Registerer) History {
	h := History{
		EntriesWritten: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "syncer_history_entries_written_total", Help: "Entries of the rows' story written (syncer history).",
		}),
		WriteErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "syncer_history_write_errors_total", Help: "Writes of the rows' story that failed: their entries are missing from syncer history; the export went on.",
		}),
	}
	reg.MustRegister(h.EntriesWritten, h.WriteErrors)
	return h
}

// HistoryWritten counts n entries of the story written.
func (m *Metrics) HistoryWritten(n int) {
	if m == nil {
		return
	}
	m.History.EntriesWritten.Add(float64(n))
}

// HistoryWriteFailed counts a write of the story that failed.
func (m *Metrics) HistoryWriteFailed() {
	if m == nil {
		return
	}
	m.History.WriteErrors.Inc()
}

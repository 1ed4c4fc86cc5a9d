package status

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/replays"
	"github.com/syncer-dev/syncer/internal/verify"
)

// Report is the status. The first six fields are the contract's keys.
type Report struct {
	Total                    int64   `json:"total"`
	Unsynced                 int64   `json:"unsynced"`
	Synced                   int64   `json:"synced"`
	Failed                   int64   `json:"failed"`
	OutboxPending            int64   `json:"outbox_pending"`
	OldestUnsyncedAgeSeconds float64 `json:"oldest_unsynced_age_seconds"`

	Pending int64 `json:"pending"`
	// SkippedUnchanged counts the versions of every source settled as
	// skipped: their body was the one the third party last accepted, and
	// no request was made (issue 45).
	SkippedUnchanged int64 `json:"skipped_unchanged"`
	// Lock is resources' export lock, as its entry in Sources says: kept
	// for the scripts that read it here.
	Lock    Lock    `json:"lock"`
	Breaker Breaker `json:"breaker"`
	// Credentials says whether the third party refused our token.
	Credentials breakerstore.Refusal `json:"credentials"`
	// Configuration says whether the third party's URL answered with a
	// redirect, 404 or 410: a configuration error, nothing is sent.
	Configuration breakerstore.Refusal `json:"configuration"`
	// Pause is set while a 429, a quota or a Retry-After holds every push.
	Pause *breakerstore.Pause `json:"pause,omitempty"`
	// Rate is the request rate learnt from the third party's bare 429s.
	Rate *breakerstore.Rate `json:"learned_rate,omitempty"`
	// LastError is the last failure of a request to the third party:
	// bounded, escaped and token-free text.
	LastError *breakerstore.LastError `json:"last_error,omitempty"`
	// Checkpoints are the live sync's and those of the replays shown.
	Checkpoints []Checkpoint `json:"checkpoints"`
	// Replays are every unfinished replay and the last finished ones, by
	// id.
	Replays        []Replay  `json:"replays"`
	RecentFailures []Failure `json:"recent_failures"`
	// Sessions are what each syncer process holds of the database: its
	// server sessions and advisory locks (sessions.go).
	Sessions []DaemonSessions `json:"sessions"`
	// HeldKeys are keys the third party answered transiently on their
	// own (an item's 429 or 5xx, a webhook row's 404): pending, going
	// again alone on their own backoff, the longest held first. Their
	// neighbours, their source and their destination flow.
	HeldKeys []HeldKey `json:"held_keys"`
	// Jobs counts syncer's unfinished River jobs by "kind:state".
	Jobs map[string]int `json:"jobs"`
	// ResourcesExported says whether resources is exported here: no
	// source is installed, or resources holds rows, or its live sync ran.
	// A setup of sources alone has no use for resources' lines.
	ResourcesExported bool `json:"resources_exported"`
	// Destinations are the sources' destinations, by name, with their own
	// shared facts: DefaultDestination among them while resources is
	// exported.
	Destinations []Destination `json:"destinations"`
	// Sources are every source exported: the configured sources
	// (SYNCER_CONFIG) installed, by name, then resources
	// (ResourcesSource) while it is exported. The contract's keys above
	// are the sums of their entries (Report.sum): a source's unsynced
	// rows are its pending and failed ones.
	Sources []Source `json:"sources"`
}

// Source is one source's state, resources' as any other's.
type Source struct {
	Name        string `json:"name"`
	Table       string `json:"table"`
	Destination string `json:"destination"`
	// Total counts its rows: for a configured source only its pending and
	// failed keys (its synced rows would take a scan of the application's
	// table).
	Total int64 `json:"total"`
	// Synced counts its rows synced: resources' only (see Total).
	Synced                  int64   `json:"synced"`
	Pending                 int64   `json:"pending"`
	Failed                  int64   `json:"failed"`
	OldestPendingAgeSeconds float64 `json:"oldest_pending_age_seconds"`
	// Snapshot is a configured source's snapshot state; empty for
	// resources, which has none.
	Snapshot string `json:"snapshot"`
	// SnapshotPercent is the snapshot's progress, -1 when unknown.
	SnapshotPercent float64 `json:"snapshot_percent"`
	// InFlight counts its batches recorded and not yet marked: sent and
	// unanswered, or answered within the last look (a hot poll writes
	// their outcomes with its next record, a HotPoll later).
	InFlight int `json:"batches_in_flight"`
	// SkippedUnchanged counts its versions settled as skipped: their body
	// was the one the third party last accepted, and no request was made.
	SkippedUnchanged int64 `json:"skipped_unchanged"`
	// Error says why the daemon stopped exporting the source (its table
	// no longer matches its configuration).
	Error string `json:"error,omitempty"`
	// Warning says what of the source is not captured (partitions made
	// since migrate) while it exports.
	Warning string `json:"warning,omitempty"`
	// Stopped says why nothing of the source is sent now: its Error, or
	// its destination's refusal, open breaker or pause; empty while it
	// exports.
	Stopped string `json:"stopped,omitempty"`
	// Lock says who holds its export lock.
	Lock Lock `json:"lock"`
	// Verify is its last verify (`syncer verify`, background or "Verify
	// now"): state, time and counts by kind; absent before the first.
	Verify *verify.Last `json:"verify,omitempty"`
	// VerifyTenants are its tenants' last verifies (a source whose
	// destination reads each tenant from its own account: `syncer verify
	// --source` of every tenant, --tenant, or background), by tenant.
	VerifyTenants []TenantVerify `json:"verify_tenants,omitempty"`
	// Tenants are its tenants, for a source with a tenant column.
	Tenants *Tenants `json:"tenants,omitempty"`
}

// TenantVerify is one tenant's last verify.
type TenantVerify struct {
	Tenant string `json:"tenant"`
	*verify.Last
}

// Destination is a configured destination's state: the facts its daemons
// share (breakerstore, in the destination's namespace) and its requests in
// flight.
type Destination struct {
	Name string `json:"name"`
	// Sources are the names of the sources that go to it.
	Sources []string `json:"sources"`
	Breaker Breaker  `json:"breaker"`
	// Credentials says whether it refused the token.
	Credentials breakerstore.Refusal `json:"credentials"`
	// Configuration says whether its URL answered a redirect, 404 or 410.
	Configuration breakerstore.Refusal `json:"configuration"`
	Pause         *breakerstore.Pause  `json:"pause,omitempty"`
	// Paused is set while a person paused it (syncer pause, the console):
	// since when and by what.
	Paused *breakerstore.Hold `json:"paused,omitempty"`
	Rate   *breakerstore.Rate `json:"learned_rate,omitempty"`
	// InFlight counts the batches of its sources recorded and not yet
	// marked: its requests in flight, and for a HotPoll after its
	// answer a hot poll's last batch (see Source.InFlight).
	InFlight int `json:"requests_in_flight"`
	// InFlightNote says what InFlight means while a person paused the
	// destination (PausedInFlight); empty otherwise.
	InFlightNote string                  `json:"in_flight_note,omitempty"`
	LastError    *breakerstore.LastError `json:"last_error,omitempty"`
	// Certificate is the first of its tls files' certificates to end, when
	// it has tls files.
	Certificate *breakerstore.Certificates `json:"certificate,omitempty"`
}

// PausedInFlight is what a paused destination's requests in flight are:
// no request starts while a person's pause holds (every running daemon
// holds it once syncer pause returns), so what is counted was recorded
// before it, answered or not, and goes first, under its own key, on
// resume.
const PausedInFlight = "no request starts while paused: these are batches recorded before the pause and not yet marked; each goes first, under its own key, on resume"

// CertificateWarning is how near its end a destination's certificate is
// said in status's text: 14 days.
const CertificateWarning = 14 * 24 * time.Hour

// Stopped says why nothing goes to the destination now; empty when
// batches may go.
func (d *Destination) Stopped() string {
	switch {
	case d.Paused != nil:
		return fmt.Sprintf("destination %s paused by %s since %s", d.Name, d.Paused.By, d.Paused.Since.Format(time.RFC3339))
	case d.Credentials.Refused && d.Credentials.TokenEndpoint != "":
		return fmt.Sprintf("destination %s: its token endpoint %s refuses the client credentials: %s", d.Name, d.Credentials.TokenEndpoint, d.Credentials.Message)
	case d.Credentials.Refused:
		return fmt.Sprintf("destination %s refuses the credentials: %s", d.Name, d.Credentials.Message)
	case d.Configuration.Refused && d.Configuration.Status == 0:
		// No answer said so: syncer holds it, for a request program
		// that fails on every row or a rejection storm; the message says
		// which.
		return fmt.Sprintf("destination %s held for its configuration, no row failed: %s", d.Name, d.Configuration.Message)
	case d.Configuration.Refused:
		return fmt.Sprintf("destination %s refuses the URL (a redirect, 404 or 410): %s", d.Name, d.Configuration.Message)
	case d.Breaker.State == "open":
		return fmt.Sprintf("destination %s: circuit breaker open until %s", d.Name, d.Breaker.Until.Format(time.RFC3339))
	case d.Pause != nil:
		return fmt.Sprintf("destination %s paused until %s: %s", d.Name, d.Pause.Until.Format(time.RFC3339), d.Pause.Cause)
	}
	return ""
}

// JobNames returns the keys of Jobs ("kind:state"), sorted.
func (r *Report) JobNames() []string {
	keys := make([]string, 0, len(r.Jobs))
	for k := range r.Jobs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Lock says who holds a source's export lock.
type Lock struct {
	Held bool `json:"held"`
	// PID is the holder's backend pid on the database server.
	PID             int    `json:"pid,omitempty"`
	ApplicationName string `json:"application_name,omitempty"`
	ClientAddr      string `json:"client_addr,omitempty"`
	// Host and Process are the holding daemon's machine and process id,
	// read from its application_name; empty for a session syncer did not
	// name (a psql holding the key by hand).
	Host    string `json:"host,omitempty"`
	Process int    `json:"process,omitempty"`
	Role    string `json:"role,omitempty"`
}

// Breaker is the shared circuit breaker's state.
type Breaker struct {
	State string    `json:"state"`
	Until time.Time `json:"until,omitzero"`
}

// Checkpoint is a job's position.
type Checkpoint struct {
	Name        string    `json:"name"`
	LastID      int64     `json:"last_id"`
	RowsDone    int64     `json:"rows_done"`
	RowsFailed  int64     `json:"rows_failed"`
	BatchesDone int64     `json:"batches_done"`
	InFlight    int       `json:"batches_in_flight"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// Replay is a replay's progress.
type Replay struct {
	ID int64 `json:"id"`
	// Source names the configured source of a source's replay, whose
	// progress counts keys; empty for a replay of resources.
	Source string `json:"source,omitempty"`
	// Tenant names the tenant of a replay of one tenant's rows
	// (replay --source S --tenant T), whose progress counts its keys.
	Tenant string `json:"tenant,omitempty"`
	// State is the progress's shown state: "sending" while a source's
	// replay has queued its keys (done) and some are still to be sent.
	State     replays.State `json:"state"`
	TotalRows int64         `json:"total_rows"`
	RowsDone  int64         `json:"rows_done"`
	Percent   float64       `json:"percent"`
	CreatedAt time.Time     `json:"created_at"`
}

// SourceStopped says why nothing of a source is sent now: the error that
// stopped its export, or why its destination sends nothing; empty while it
// exports. The daemon's syncer_source_stopped asks the facts' owner
// (breakerstore.State.Stops), which decides on the same facts.
func SourceStopped(sourceError string, d *Destination) string {
	if sourceError != "" || d == nil {
		return sourceError
	}
	return d.Stopped()
}

// ResourcesSource is the name of the source that is the resources table.
const ResourcesSource = jobs.Resources

// DefaultDestination is resources' destination, the one the
// SYNCER_THIRDPARTY_* settings build (metrics.DefaultDestination).
const DefaultDestination = "default"

// HeldKey is a key held after transient answers of its own.
type HeldKey struct {
	// Source is the source's name, or ResourcesSource.
	Source string `json:"source"`
	// ID is the row's id, or the key's text form: what retry-failed
	// --id and --key take.
	ID          string `json:"id"`
	Version     int64  `json:"version"`
	Destination string `json:"destination,omitempty"`
	// State is "retrying" within the retry bound (the destination's
	// backoff max elapsed), "held" past it.
	State string `json:"state"`
	// Reason is the third party's last answer to it: status and text.
	Reason  string    `json:"reason"`
	Tries   int       `json:"tries"`
	Since   time.Time `json:"since"`
	NextTry time.Time `json:"next_try"`
}

// Held key states.
const (
	HeldRetrying = "retrying"
	HeldHolding  = "held"
)

// Failure is a failed row of resources or a failed key of a source.
type Failure struct {
	// Source is the source's name, or ResourcesSource.
	Source string `json:"source"`
	// ID is the row's id, or the key's text form (a composite key's
	// compact JSON array): what retry-failed --id and --key take.
	ID          string `json:"-"`
	Version     int64  `json:"version"`
	Destination string `json:"destination"`
	// Tenant is the tenant the key failed for, for a source with a
	// tenant column.
	Tenant   string    `json:"tenant,omitempty"`
	FailedAt time.Time `json:"failed_at"`
	// Error is the third party's own reason, as the format reads it.
	Error string `json:"error"`
}

// MarshalJSON writes id as a number for resources, whose ids are
// integers, and as the key's text for a source.
func (f Failure) MarshalJSON() ([]byte, error) {
	type plain Failure
	id := json.RawMessage(strconv.Quote(f.ID))
	if _, err := strconv.ParseInt(f.ID, 10, 64); err == nil && f.Source == ResourcesSource {
		id = json.RawMessage(f.ID)
	}
	return json.Marshal(struct {
		ID json.RawMessage `json:"id"`
		plain
	}{id, plain(f)})
}

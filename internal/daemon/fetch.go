package daemon

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivershared/baseservice"
	"github.com/riverqueue/river/rivershared/riverpilot"
	"github.com/riverqueue/river/rivertype"
)

// fetchDriver is River's pgx driver through which the relay starts the
// jobs it inserted at once, instead of at River's next poll
// (FetchPollInterval, 200 ms): River polls in every mode (PollOnly), and
// a job inserted after its source's job had ended (an idle daemon's first
// rows) waited for the poll, 100-220 ms of rows, the whole of the
// latency's p99 through a pooler (docs/design.md, "A job inserted starts
// at once"). The relay inserts its jobs in its round's transaction, which
// River's own trigger (after a non-transactional insert) does not cover;
// River hands that trigger to a driver's pilot (NotifyNonTxJobInsert,
// "for poll-only clients"), so this driver's pilot keeps it for the relay
// to call once its round committed. River calls it only when the driver
// reports no listener, which is what River runs anyway with PollOnly: it
// then starts no notifier and elects its leader by polling, as before.
// River's API for both is marked unstable (pinned in go.mod);
// TestRelayStartsItsJobAtOnce fails if an upgrade loses the trigger.
type fetchDriver struct {
	*riverpgxv5.Driver
	pilot *fetchPilot
}

var _ riverdriver.Driver[pgx.Tx] = (*fetchDriver)(nil)

func newFetchDriver(pool *pgxpool.Pool) *fetchDriver {
	return &fetchDriver{Driver: riverpgxv5.New(pool), pilot: &fetchPilot{StandardPilot: &riverpilot.StandardPilot{}}}
}

// SupportsListener is false so that River triggers its producer itself
// after an insert (see fetchDriver). The driver still sends River's
// notifications (SupportsListenNotify), as before.
func (d *fetchDriver) SupportsListener() bool { return false }

// PluginInit and PluginPilot make this driver one of River's driver
// plugins, which is how a client takes a pilot of its own.
func (d *fetchDriver) PluginInit(*baseservice.Archetype) {}

func (d *fetchDriver) PluginPilot() riverpilot.Pilot { return d.pilot }

// Fetch makes this process's River fetch the queues of jobs now: they are
// available and their transaction committed. It does nothing before River
// was built, or if River never handed over its trigger.
func (d *fetchDriver) Fetch(ctx context.Context, jobs []*rivertype.JobRow) {
	notify := d.pilot.notify
	if notify == nil || len(jobs) == 0 {
		return
	}
	res := make([]*rivertype.JobInsertResult, len(jobs))
	for i, j := range jobs {
		res[i] = &rivertype.JobInsertResult{Job: j}
	}
	notify(ctx, res)
}

// fetchPilot is River's standard pilot, keeping the client's trigger of
// its producers.
type fetchPilot struct {
	*riverpilot.StandardPilot
	// notify is set once, while River's client is built, before the relay
	// that calls it exists.
	notify func(context.Context, []*rivertype.JobInsertResult)
}

func (p *fetchPilot) PilotInit(archetype *baseservice.Archetype, params *riverpilot.PilotInitParams) {
	p.notify = params.NotifyNonTxJobInsert
	p.StandardPilot.PilotInit(archetype, params)
}

package sources

// Spec is a configured source as this package needs it: the table, its
// key, payload, filter and destination, as the configuration names them.
// The configuration file is read elsewhere (config.Source embeds a Spec),
// so this package does not depend on how settings are spelled or parsed.
type Spec struct {
	// Name names the source in status, metrics, logs and the change log.
	Name string
	// Schema is the table's schema; empty when the table is looked up on
	// the search_path.
	Schema string
	// Table is the table's name.
	Table string
	// Keys are the table's primary key columns, in the configuration's
	// order.
	Keys []string
	// Key names the key in messages and records: the column for a key of
	// one column, else the compact JSON array of the columns' names.
	Key string
	// Columns are the columns of the payload, in order; nil means the
	// whole row.
	Columns []string
	// Destination names the destination its batches go to.
	Destination string
	// Snapshot says whether rows already in the table when the source is
	// installed are exported once.
	Snapshot bool
	// ChangedAt names the table's column that holds the time of a row's
	// last change (updated_at), on which `replay --source --since/--until`
	// select rows; empty when there is none (syncer keeps no time per row
	// of its own).
	ChangedAt string
	// Where is the row filter: an SQL expression over the table's
	// columns; a row is exported while it holds (docs/protocol.md, Table
	// shapes). Empty exports every row.
	Where string
	// Tenant names the table's column that says whose a row is (contract
	// section 10): a NOT NULL column; each row goes to its tenant's
	// account only. Empty: the source has no tenants.
	Tenant string
	// Lanes is how many shares a source with a tenant column is exported
	// in: a tenant hashes to one lane, and each lane is its own job, lock
	// and checkpoint, taken by any running daemon. Defaults to
	// LanesDefault (16) when Tenant is set; 0 without one.
	Lanes int
}

// LanesDefault is a tenant source's number of lanes when the
// configuration does not say: enough for a few daemons to share a
// source, few enough that idle lanes cost nothing measurable (a lane with
// no pending change has no job).
const LanesDefault = 16

// LanesMax bounds lanes: each lane with work is a job and a session.
const LanesMax = 256

// QualifiedTable is the table as the configuration names it: schema.table
// or table.
func (s *Spec) QualifiedTable() string {
	if s.Schema == "" {
		return s.Table
	}
	return s.Schema + "." + s.Table
}

// specNamed returns the spec named name, or nil.
func specNamed(specs []Spec, name string) *Spec {
	for i := range specs {
		if specs[i].Name == name {
			return &specs[i]
		}
	}
	return nil
}

// Package sources exports the application's own tables: it installs the
// capture triggers on them (`syncer migrate --config`), and it reads and
// marks their pending work for the exporter. It owns every statement on
// syncer_sources, syncer_changes and syncer_source_failures, and every
// statement syncer runs on a source's table. docs/sources.md explains the
// design; the guarantees:
//
//   - Nothing of the application's table changes but its triggers: no
//     column is added, none altered. Each source gets four statement-level
//     triggers (AFTER INSERT, UPDATE and DELETE with transition tables, and
//     BEFORE TRUNCATE; row triggers for a partitioned table) named
//     syncer_<hash>_<op>, which append one row per
//     row written to syncer_changes, in the writer's transaction (so a
//     rolled-back write logs nothing), and one outbox event and
//     notification per statement through the gate.
//   - Versions only increase per key: an item's version is the highest seq
//     of its key's pending changes, and seq is one uncached global sequence.
//     Writers of one key serialise on its row lock (and inserts of one key
//     on the primary key), and the snapshot takes a share lock on the rows
//     it logs, so for one key a higher seq always commits later. A delete
//     and a re-insert therefore go on with higher versions.
//   - A payload is read with its version: Pending reads the highest seq of
//     each key and the row itself in one statement, so the payload is at
//     least as new as the version, and a key whose row is gone is a
//     tombstone.
//   - A mark only covers what was sent: MarkSynced and MarkFailed delete a
//     key's changes up to the version sent, so a change that arrived since
//     keeps the key pending, at its higher version.
//   - Keys are read in the key's own order (integer keys numerically, text
//     and uuid keys in byte order) by keyset from an index, never by a scan
//     of the application's table; so is the snapshot, by its primary key,
//     in short transactions.
//   - A source whose table or configured column is gone fails loudly and
//     alone: Pending returns a *SchemaError naming the source and the
//     column; Check does for a table dropped, renamed or without its
//     triggers, which no change would reveal.
//   - A partitioned table is captured by row triggers, which PostgreSQL
//     clones to every partition, and TRUNCATE triggers on each partition,
//     so writes made to a partition directly are captured too.
//   - No column name can change what is read or logged: the whole row is
//     to_jsonb(t.*), existence a constant of the lookup, every column
//     qualified.
package sources

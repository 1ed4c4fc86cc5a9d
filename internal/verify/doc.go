// Package verify reads back what a destination holds for a source's keys,
// compares it with the database and, when asked, heals what drifted
// (`syncer verify`, docs/protocol.md "Verify and heal"). Its guarantees:
//
//   - Every key of the range is sorted into exactly one kind: ok, missing
//     (live here, absent there), stale (there, but not the payload here, or
//     below the version last accepted), zombie (deleted or filtered out
//     here, present there), failed (its latest version was rejected: not
//     drift, never healed), unknown (the answer did not say) or pending (its
//     latest change is still to be exported: never drift, and never asked
//     for, since the third party cannot be expected to hold it yet).
//   - Keys are read from the source's owner package in key order, in pages,
//     the table as it is now, then the graves: keys deleted here whose
//     tombstones the row's story (internal/history) holds, so a hard
//     delete is still checked (graves.go); the destination is asked in batches of at
//     most Config.LookupSize ids. Payloads are compared as JSON values, so
//     key order and spacing never make drift.
//   - A run is resumable: after each page its cursor and counts are saved
//     (syncer_verify_runs, owned here), so a run interrupted by SIGINT or a
//     crash goes on after the last page it finished, with the counts it had;
//     a page half done is checked again, which changes no count twice since
//     the page's counts are saved with its cursor.
//   - Healing goes through the export path only: a drifted key becomes
//     pending again as a new version (a tombstone for a zombie), in the
//     page's transaction with the saved cursor, and the running daemons send
//     it under the destination's limits with a new key. verify never writes
//     to the third party and never marks anything synced.
//   - Reads are paced by a rate limiter at the destination's rate, and take
//     a quarter of it while the source has rows pending, so a verify never
//     takes more than a quarter of the destination's requests from the
//     export that is catching up. A run from the command line records its
//     share in the destination's facts and the daemons' deliverers send at
//     the rest (share.go), so the two stay within the rate together.
//   - Examples (up to 20 a kind) show the two payloads, never a credential.
//   - Every run's start and end are kept as the source's last verify
//     (syncer_verify_last, owned here): status, the console and the
//     metrics read it (LastRuns), and "Verify now" asks for a run through
//     it (Request).
//   - Background runs (Background, a destination's verify_every) are the
//     daemons': one daemon a source under its verify lock, pages spread
//     over half the period, lookups taking turns from the destination's
//     shared limiter (Pace.Turn), resumed by the next daemon when one
//     stops half way (background.go).
//   - One tenant of a source with a tenant column (NewConfiguredTenant,
//     `syncer verify --tenant`) is a run of its own: its rows only, read
//     from its account, healed for it, its cursor and last run kept under
//     tenant.RunKey so that each tenant resumes on its own. RunTenants runs
//     every tenant with rows in turn (the background's and `syncer verify
//     --source` of a destination with a tenants block).
package verify

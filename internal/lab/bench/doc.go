// Package bench measures syncer against baselines taken in the same run, on
// the same machine and database, so its figures are ratios rather than
// absolute numbers that only mean something on one laptop.
//
// What it guarantees:
//   - The daemon under test is the real binary, run as a subprocess (the
//     syncer executable with `run`), so its memory is its own (read from
//     /proc/<pid>/status VmHWM) and the bench's own work (the fake third
//     party, the writers, the pollers) is not charged to it.
//   - Every scenario works in scratch schemas it creates, migrates and drops,
//     and tags every session with the schema's name, so nothing else in the
//     database is read, counted or touched, and cleanup can end the sessions
//     it left behind. The dbshare scenario (dbshare.go; its bed in
//     dbshare_bed.go, a phase in dbshare_phase.go) makes a cluster of its
//     own as well (cluster.go), since every PostgreSQL process's CPU is what
//     it counts, and removes it.
//   - Every figure has a baseline measured in the same run: the database's
//     own bound for the drain, plain inserts for writer overhead, the
//     common job-per-insert recipe (recipe.go) for job economy and bursts,
//     and a plain polling exporter (poller.go, a process of its own) for
//     the daemon's CPU per row exported.
//   - No test asserts a timing. SizeTiny runs every scenario at 1-2% of its
//     size so CI exercises all of this code without depending on the
//     machine's speed.
package bench

// Package lab is the wing of the house that ships in no production
// container: the bench (lab/bench), the chaos soak (lab/soak), the fake
// third party (lab/fakethirdparty), the builds of another ref the bench
// compares with (lab/refbuild) and their command, syncer-lab
// (lab/labcli). Nothing under internal/lab is imported by the daemon's
// packages (cmd/syncer's TestDaemonLinksNoLab holds it); the lab imports
// the product freely, as a user's process would drive it.
package lab

package metrics

// Deprecated names the series this release still serves under their old
// names, each with the series of the sources' families it is an alias of
// (the same value, for the source resources): the release before had them
// for resources alone, and dashboards and alerts written for it keep
// working through one release. The next release removes them
// (docs/operations.md, "Deprecated metric names").
var Deprecated = map[string]string{
	"syncer_unsynced_rows":               `syncer_source_pending{source="resources"} + syncer_source_failed{source="resources"}`,
	"syncer_failed_rows":                 `syncer_source_failed{source="resources"}`,
	"syncer_oldest_unsynced_age_seconds": `syncer_source_oldest_pending_age_seconds{source="resources"}`,
	"syncer_lock_held":                   `syncer_source_lock_held{source="resources"}`,
}

// deprecatedHelp is the help text of a deprecated name: what to read
// instead.
func deprecatedHelp(name string) string {
	return "Deprecated, removed in the next release: read " + Deprecated[name] + "."
}

package breakerstore

// DefaultNamespace is the namespace of the export of resources to
// SYNCER_THIRDPARTY_URL: its keys are unprefixed, as before destinations
// had namespaces.
const DefaultNamespace = ""

// DestinationNamespace is the namespace of configured destination name's
// facts (breaker, credentials, configuration, pause, learnt rate, last
// error): keys "destination:<name>:<key>" in syncer_state.
func DestinationNamespace(name string) string { return "destination:" + name }

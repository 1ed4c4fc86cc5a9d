package breakerstore

// DefaultNamespace is the namespace of the export of resources to
// SYNCER_THIRDPARTY_URL: its keys are unprefixed, as before destinations
// had namespaces.
const DefaultNamespace = ""

// DestinationNamespace is the namespace of destination name's facts
// (breaker, credentials, configuration, pause, learnt rate, last error):
// keys "destination:<name>:<key>" in syncer_state, and DefaultNamespace
// for the destination named default (the SYNCER_THIRDPARTY_* settings'),
// whose facts kept the keys they had before destinations had names.
func DestinationNamespace(name string) string {
	if name == defaultDestination {
		return DefaultNamespace
	}
	return "destination:" + name
}

// defaultDestination is metrics.DefaultDestination and
// config.DefaultDestination: breakerstore imports neither.
const defaultDestination = "default"

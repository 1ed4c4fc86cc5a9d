package breakerstore

// TenantNamespace is the namespace of one tenant's facts at destination
// name (docs/protocol.md section 10): its breaker, learnt rate, refusal,
// pause, hold and probe, under keys "destination:<name>/tenant:<tenant>:<key>"
// in syncer_state. Every tenant's facts stand apart from the
// destination's own and from every other tenant's, so a person's pause of
// one tenant (syncer pause --destination crm --tenant acme) is a hold in
// that namespace, and the tenant's deliverer honours it as a destination
// honours its own. Keys are read whole, never by prefix, so a tenant's
// value may hold any character.
func TenantNamespace(name, tenant string) string {
	return "destination:" + name + "/tenant:" + tenant
}

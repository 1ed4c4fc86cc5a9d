package sources

// Scope narrows a call to the rows of one tenant of a source with a
// tenant column; the zero Scope is every row of the source. The calls
// that act on a source's rows (PendingKept, QueueMarks, HeldPage, Resend,
// PendingOf, RetryFailed) take one, where they had a Tenant* twin each:
// a command cannot reach the whole source by forgetting to thread the
// tenant through, nor a tenant's rows by a function of another name.
type Scope struct {
	// Tenant is the tenant's value; "" for every row.
	Tenant string
	// Lane is the tenant's lane, which a lane's feed reads (PendingKept):
	// the lane the feed serves, not recomputed, so a read after a relane
	// stays in its lane. TenantOf sets it from the tenant.
	Lane int
}

// TenantOf is the scope of tenant's rows of src, in the tenant's lane
// now; the zero Scope when tenant is "".
func TenantOf(src *Source, tenant string) Scope {
	if tenant == "" {
		return Scope{}
	}
	return Scope{Tenant: tenant, Lane: Lane(tenant, src.Lanes)}
}

// check refuses a tenant's scope of a source without a tenant column.
func (sc Scope) check(src *Source) error {
	if sc.Tenant == "" {
		return nil
	}
	return src.checkTenant(sc.Tenant)
}

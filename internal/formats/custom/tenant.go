package custom

import (
	"net/url"

	"github.com/syncer-dev/syncer/internal/delivery"
)

// tenantVar is the variable every program may read: the tenant a
// destination with tenants sends for (docs/destinations.md, "Tenants"),
// null for a destination without.
const tenantVar = "$tenant"

// TenantID is the key of $tenant that holds the tenant's value.
const TenantID = "id"

// tenantBinding is a tenant as a tenant-bound Format sees it.
type tenantBinding struct {
	id  string
	obj map[string]any // $tenant: {"id": id, <column>: value, ...}
}

// value is $tenant: null when unbound.
func (t *tenantBinding) value() any {
	if t == nil {
		return nil
	}
	return t.obj
}

// pathValue is what {tenant} becomes in a path: the tenant's value,
// percent-escaped; unbound, the placeholder stays as written.
func (t *tenantBinding) pathValue() string {
	if t == nil {
		return "{tenant}"
	}
	return url.PathEscape(t.id)
}

// ForTenant returns f bound to one tenant: {tenant} in its paths is
// tenant (percent-escaped), and its programs see $tenant as the object
// {"id": tenant} with columns added, each under its own name (the extra
// columns of the tenant's connection row; a column named "id" does not
// replace the tenant's value). columns' values are JSON values as
// encoding/json decodes them with UseNumber; the map is not kept. f is
// not changed; the copy shares its compiled programs.
func (f *Format) ForTenant(tenant string, columns map[string]any) delivery.Format {
	obj := make(map[string]any, len(columns)+1)
	for k, v := range columns {
		obj[k] = v
	}
	obj[TenantID] = tenant
	c := *f
	c.tenant = &tenantBinding{id: tenant, obj: obj}
	return &c
}

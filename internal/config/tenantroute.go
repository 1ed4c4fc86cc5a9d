package config

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// checkTenantRoute refuses a source whose rows could not find their
// account (contract section 10): a source without a tenant column sent to
// a destination that sends each tenant to its own URL (its url is absent,
// each tenant's row giving one, or holds {tenant}), where there is no
// tenant to fill in; and a source with a tenant column sent to the
// default destination (SYNCER_THIRDPARTY_*), which has no tenants
// registry, so its tenants would share one account's state unnoticed.
func checkTenantRoute(s *Source, cfg *Config, f map[string]*yaml.Node, n *yaml.Node, path string) error {
	if s.Tenant != "" {
		if s.Destination == DefaultDestination {
			return &Error{Path: join(path, "tenant"), Line: line(f, "tenant", n),
				Msg: fmt.Sprintf("a source with a tenant column must send to a configured destination: destination %q (SYNCER_THIRDPARTY_*) has no tenants", DefaultDestination)}
		}
		return nil
	}
	d := cfg.Destination(s.Destination)
	if d == nil {
		return nil
	}
	why := ""
	switch {
	case d.URL == "":
		why = "has no url (each tenant's connection row gives its own)"
	case strings.Contains(d.URL, "{tenant}"):
		why = "has {tenant} in its url"
	default:
		return nil
	}
	return &Error{Path: join(path, "destination"), Line: line(f, "destination", n),
		Msg: fmt.Sprintf("destination %q %s: only a source with a tenant column (tenant: <column>) may send to it", d.Name, why)}
}

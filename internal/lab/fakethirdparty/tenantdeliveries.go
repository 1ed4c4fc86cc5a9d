package fakethirdparty

// TenantDeliveries returns what tenant's account accepted, as Deliveries
// does for the untenanted one; nil for a tenant never seen.
func (s *Server) TenantDeliveries(tenant string) []Delivery {
	if s.tenants == nil {
		return nil
	}
	s.tenants.mu.Lock()
	a := s.tenants.accounts[tenant]
	s.tenants.mu.Unlock()
	if a == nil {
		return nil
	}
	return a.Deliveries()
}

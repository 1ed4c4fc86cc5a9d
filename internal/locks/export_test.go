package locks

import "context"

// Vanish unlocks lk on its holder session behind its back, as a pooler in
// transaction mode or an operator's pg_advisory_unlock would.
func Vanish(lk *Lock) error {
	h := &lk.locker.h
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := h.conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", lk.key)
	return err
}

// HolderSettings reads settings on the Locker's holder session.
func HolderSettings(l *Locker, names ...string) (map[string]string, error) {
	h := &l.h
	h.mu.Lock()
	defer h.mu.Unlock()
	conn, err := l.holderConn(context.Background())
	if err != nil {
		return nil, err
	}
	got := map[string]string{}
	for _, name := range names {
		var v string
		if err := conn.QueryRow(context.Background(), "SELECT current_setting($1)", name).Scan(&v); err != nil {
			return nil, err
		}
		got[name] = v
	}
	return got, nil
}

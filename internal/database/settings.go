package database

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// startupParams are the parameters a connection pooler passes on in the
// startup packet: those PgBouncer tracks itself (its stock settings refuse
// any other with "unsupported startup parameter"). Every other setting is
// made with set_config once connected.
var startupParams = map[string]bool{
	"application_name":            true,
	"client_encoding":             true,
	"datestyle":                   true,
	"timezone":                    true,
	"standard_conforming_strings": true,
}

// ApplySettings makes cc's sessions run with settings (name to value) and
// with every startup parameter of cc a pooler would refuse (jit,
// search_path, tcp_keepalives_idle...): those leave cc.RuntimeParams and
// are set with set_config, in one statement, as soon as a connection is
// open (cc.AfterConnect, after whatever it already does). A setting the
// server refuses fails the connection, with an error naming the setting, as
// the same setting in the startup packet would. cc is modified.
func ApplySettings(cc *pgx.ConnConfig, settings map[string]string) {
	all := maps.Clone(settings)
	if all == nil {
		all = map[string]string{}
	}
	for k, v := range cc.RuntimeParams {
		if !startupParams[strings.ToLower(k)] {
			if _, ok := all[k]; !ok {
				all[k] = v
			}
			delete(cc.RuntimeParams, k)
		}
	}
	if len(all) == 0 {
		return
	}
	names := slices.Sorted(maps.Keys(all))
	var sql strings.Builder
	args := make([][]byte, 0, 2*len(names))
	sql.WriteString("SELECT ")
	for i, name := range names {
		if i > 0 {
			sql.WriteString(", ")
		}
		fmt.Fprintf(&sql, "set_config($%d, $%d, false)", 2*i+1, 2*i+2)
		args = append(args, []byte(name), []byte(all[name]))
	}
	stmt := sql.String()
	prev := cc.AfterConnect
	cc.AfterConnect = func(ctx context.Context, pgConn *pgconn.PgConn) error {
		if prev != nil {
			if err := prev(ctx, pgConn); err != nil {
				return err
			}
		}
		if _, err := pgConn.ExecParams(ctx, stmt, args, nil, nil, nil).Close(); err != nil {
			return fmt.Errorf("set session settings %s: %w", strings.Join(names, ", "), err)
		}
		return nil
	}
}

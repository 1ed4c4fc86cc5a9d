package config

import (
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/syncer-dev/syncer/internal/tenants"
)

var tenantsFields = []string{"query", "on_refresh", "timeout", "replay_on_change"}

// Bounds of tenants.timeout: a run shorter than MinTenantsTimeout fails on
// a busy database, and one longer than MaxTenantsTimeout holds a lane's
// tenant without a row that long.
const (
	MinTenantsTimeout = 100 * time.Millisecond
	MaxTenantsTimeout = time.Minute
)

// tenants reads a destination's tenants block (docs/protocol.md section
// 10) into the settings of internal/tenants. The statements are compiled
// against the database by config check (tenants.Check), not here: the
// file is read without one.
func (p *parser) tenants(f map[string]*yaml.Node, path string) (*tenants.Settings, error) {
	n, ok := f["tenants"]
	if !ok || isNull(n) {
		return nil, nil
	}
	path = join(path, "tenants")
	if n.Kind != yaml.MappingNode {
		return nil, &Error{Path: path, Line: n.Line, Msg: "must be a mapping with query and optional on_refresh"}
	}
	tf, err := p.mapping(n, path, tenantsFields)
	if err != nil {
		return nil, err
	}
	s := &tenants.Settings{}
	if s.Query, err = str(tf, "query", path); err != nil {
		return nil, err
	}
	if strings.TrimSpace(s.Query) == "" {
		return nil, &Error{Path: join(path, "query"), Line: line(tf, "query", n), Msg: "required: a SELECT of the tenant's connection row, with the tenant's value as $1"}
	}
	if !strings.Contains(s.Query, "$1") {
		return nil, &Error{Path: join(path, "query"), Line: line(tf, "query", n), Msg: "must use $1, the tenant's value, to find the tenant's one row"}
	}
	if s.OnRefresh, err = str(tf, "on_refresh", path); err != nil {
		return nil, err
	}
	if _, given := tf["on_refresh"]; given && !strings.Contains(s.OnRefresh, "$2") {
		return nil, &Error{Path: join(path, "on_refresh"), Line: line(tf, "on_refresh", n), Msg: "must store $2, the new refresh token, for the tenant $1"}
	}
	s.Timeout = tenants.QueryTimeoutDefault
	if v, ok := tf["timeout"]; ok && !isNull(v) {
		var text string
		d, err := time.Duration(0), error(nil)
		if v.Kind == yaml.ScalarNode && v.Decode(&text) == nil {
			d, err = time.ParseDuration(text)
		}
		if v.Kind != yaml.ScalarNode || err != nil || d < MinTenantsTimeout || d > MaxTenantsTimeout {
			return nil, &Error{Path: join(path, "timeout"), Line: v.Line,
				Msg: "must be a duration from 100ms to 1m, such as 5s (the longest one run of the query may take, a wait for a lock included; default 5s)"}
		}
		s.Timeout = d
	}
	if v, given := tf["replay_on_change"]; given && !isNull(v) {
		var on bool
		if v.Kind != yaml.ScalarNode || v.Tag != "!!bool" || v.Decode(&on) != nil {
			return nil, &Error{Path: join(path, "replay_on_change"), Line: v.Line, Msg: "must be true or false"}
		}
		s.NoReplayOnChange = !on
	}
	return s, nil
}

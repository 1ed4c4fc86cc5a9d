package config

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/syncer-dev/syncer/internal/rows"
	"github.com/syncer-dev/syncer/internal/sources"
)

// The file's sources: each entry's fields, its key columns, its row
// filter, and their mapping onto internal/sources' settings.

var sourceFields = []string{"name", "table", "key", "columns", "destination", "batch_size", "snapshot", "changed_at", "where", "tenant", "lanes"}

func (p *parser) sources(n *yaml.Node, cfg *Config) ([]*Source, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, &Error{Path: "sources", Line: n.Line, Msg: "must be a list of sources"}
	}
	if len(n.Content) == 0 {
		return nil, &Error{Path: "sources", Line: n.Line, Msg: "required: at least one source"}
	}
	var out []*Source
	byName := map[string]int{}
	for i, sn := range n.Content {
		s, err := p.source(i, sn, cfg)
		if err != nil {
			return nil, err
		}
		if j, dup := byName[s.Name]; dup {
			return nil, &Error{Path: sourcePath(i, s.Name), Line: sn.Line,
				Msg: fmt.Sprintf("name: %q is already the name of sources[%d]; give one of them another name", s.Name, j)}
		}
		byName[s.Name] = i
		out = append(out, s)
	}
	return out, nil
}

func sourcePath(i int, name string) string {
	if name == "" {
		return fmt.Sprintf("sources[%d]", i)
	}
	return fmt.Sprintf("sources[%d] (%s)", i, name)
}

func (p *parser) source(i int, n *yaml.Node, cfg *Config) (*Source, error) {
	path := sourcePath(i, "")
	if n.Kind != yaml.MappingNode {
		return nil, &Error{Path: path, Line: n.Line, Msg: "must be a mapping with table, key and destination"}
	}
	// The path names the source as soon as its name is known.
	var label string
	if v, ok := mappingValue(n, "name"); ok && v.Kind == yaml.ScalarNode && v.Value != "" && !isNull(v) {
		label = v.Value
	} else if v, ok := mappingValue(n, "table"); ok && v.Kind == yaml.ScalarNode && !isNull(v) {
		label = v.Value
	}
	path = sourcePath(i, label)
	f, err := p.mapping(n, path, sourceFields)
	if err != nil {
		return nil, err
	}
	s := &Source{Spec: sources.Spec{Snapshot: true}, Line: n.Line}

	table, err := str(f, "table", path)
	if err != nil {
		return nil, err
	}
	if table == "" {
		return nil, &Error{Path: join(path, "table"), Line: n.Line, Msg: "required"}
	}
	parts := strings.Split(table, ".")
	if len(parts) > 2 {
		return nil, &Error{Path: join(path, "table"), Line: line(f, "table", n), Msg: "must be table or schema.table"}
	}
	for _, part := range parts {
		if msg := checkIdentifier(part); msg != "" {
			return nil, &Error{Path: join(path, "table"), Line: line(f, "table", n), Msg: msg}
		}
	}
	if len(parts) == 2 {
		s.Schema, s.Table = parts[0], parts[1]
	} else {
		s.Table = parts[0]
	}

	if s.Name, err = str(f, "name", path); err != nil {
		return nil, err
	}
	if _, given := f["name"]; given && s.Name == "" {
		return nil, &Error{Path: join(path, "name"), Line: line(f, "name", n), Msg: "must not be empty (omit it to name the source by its table)"}
	}
	if s.Name == "" {
		s.Name = table
	}
	msg := checkName(s.Name)
	if rows.KindOf(s.Name) == rows.Resources {
		// Its lock, its job and its wake-ups would be those of
		// resources, which is a source of its own.
		msg = fmt.Sprintf("%q is the name of the source that is the table resources", s.Name)
	}
	if msg != "" {
		if _, given := f["name"]; !given {
			msg += "; give the source a name"
		}
		return nil, &Error{Path: join(path, "name"), Line: line(f, "name", n), Msg: msg}
	}

	if s.Keys, s.Key, err = keyColumns(f, path, n); err != nil {
		return nil, err
	}

	if v, ok := f["columns"]; ok && !isNull(v) {
		if v.Kind != yaml.SequenceNode {
			return nil, &Error{Path: join(path, "columns"), Line: v.Line, Msg: "must be a list of column names (omit it to export the whole row)"}
		}
		if len(v.Content) == 0 {
			return nil, &Error{Path: join(path, "columns"), Line: v.Line, Msg: "must name at least one column (omit it to export the whole row)"}
		}
		for _, c := range v.Content {
			var col string
			if c.Kind != yaml.ScalarNode || c.Decode(&col) != nil {
				return nil, &Error{Path: join(path, "columns"), Line: c.Line, Msg: "must be a list of column names"}
			}
			if msg := checkIdentifier(col); msg != "" {
				return nil, &Error{Path: join(path, "columns"), Line: c.Line, Msg: fmt.Sprintf("%q: %s", col, msg)}
			}
			if slices.Contains(s.Columns, col) {
				return nil, &Error{Path: join(path, "columns"), Line: c.Line, Msg: fmt.Sprintf("%q is listed twice", col)}
			}
			s.Columns = append(s.Columns, col)
		}
	}

	if s.Destination, err = str(f, "destination", path); err != nil {
		return nil, err
	}
	if s.Destination == "" {
		return nil, &Error{Path: join(path, "destination"), Line: line(f, "destination", n), Msg: "required: the name of one of the destinations"}
	}
	if cfg.Destination(s.Destination) == nil && s.Destination != DefaultDestination {
		names := make([]string, len(cfg.Destinations))
		for i, d := range cfg.Destinations {
			names[i] = d.Name
		}
		return nil, &Error{Path: join(path, "destination"), Line: line(f, "destination", n),
			Msg: fmt.Sprintf("no destination %q (destinations: %s)", s.Destination, strings.Join(names, ", "))}
	}

	if s.BatchSize, err = positiveInt(f, "batch_size", path); err != nil {
		return nil, err
	}
	if s.ChangedAt, err = str(f, "changed_at", path); err != nil {
		return nil, err
	}
	if _, given := f["changed_at"]; given && s.ChangedAt != "" {
		if msg := checkIdentifier(s.ChangedAt); msg != "" {
			return nil, &Error{Path: join(path, "changed_at"), Line: line(f, "changed_at", n), Msg: msg}
		}
	}
	if s.Where, err = str(f, "where", path); err != nil {
		return nil, err
	}
	if _, given := f["where"]; given && strings.TrimSpace(s.Where) == "" {
		return nil, &Error{Path: join(path, "where"), Line: line(f, "where", n), Msg: "must not be empty (omit it to export every row)"}
	}
	s.Where = strings.TrimSpace(s.Where)
	if s.Tenant, err = str(f, "tenant", path); err != nil {
		return nil, err
	}
	if _, given := f["tenant"]; given {
		if msg := checkIdentifier(s.Tenant); msg != "" {
			return nil, &Error{Path: join(path, "tenant"), Line: line(f, "tenant", n), Msg: msg}
		}
	}
	if s.Lanes, err = positiveInt(f, "lanes", path); err != nil {
		return nil, err
	}
	switch {
	case s.Lanes > sources.LanesMax:
		return nil, &Error{Path: join(path, "lanes"), Line: line(f, "lanes", n), Msg: fmt.Sprintf("must be at most %d", sources.LanesMax)}
	case s.Lanes > 0 && s.Tenant == "":
		return nil, &Error{Path: join(path, "lanes"), Line: line(f, "lanes", n), Msg: "needs tenant: only a source with a tenant column is exported in lanes"}
	case s.Tenant != "" && s.Lanes == 0:
		s.Lanes = sources.LanesDefault
	}
	if err := checkTenantRoute(s, cfg, f, n, path); err != nil {
		return nil, err
	}
	if v, ok := f["snapshot"]; ok && !isNull(v) {
		if v.Kind != yaml.ScalarNode || v.Tag != "!!bool" || v.Decode(&s.Snapshot) != nil {
			return nil, &Error{Path: join(path, "snapshot"), Line: v.Line, Msg: "must be true or false"}
		}
	}
	return s, nil
}

// str decodes an optional string field: "" when absent or null.
// keyColumns reads key: a column, or a list of the primary key's columns
// (docs/protocol.md, Table shapes), and the key's name (see Source.Key).
func keyColumns(f map[string]*yaml.Node, path string, n *yaml.Node) ([]string, string, error) {
	v, ok := f["key"]
	if ok && v.Kind == yaml.SequenceNode {
		if len(v.Content) == 0 {
			return nil, "", &Error{Path: join(path, "key"), Line: v.Line, Msg: "must name at least one column: the table's primary key"}
		}
		var cols []string
		for _, c := range v.Content {
			var col string
			if c.Kind != yaml.ScalarNode || c.Decode(&col) != nil {
				return nil, "", &Error{Path: join(path, "key"), Line: c.Line, Msg: "must be a column or a list of column names"}
			}
			if msg := checkIdentifier(col); msg != "" {
				return nil, "", &Error{Path: join(path, "key"), Line: c.Line, Msg: fmt.Sprintf("%q: %s", col, msg)}
			}
			if slices.Contains(cols, col) {
				return nil, "", &Error{Path: join(path, "key"), Line: c.Line, Msg: fmt.Sprintf("%q is listed twice", col)}
			}
			cols = append(cols, col)
		}
		if len(cols) == 1 {
			return cols, cols[0], nil
		}
		name, _ := json.Marshal(cols)
		return cols, string(name), nil
	}
	key, err := str(f, "key", path)
	if err != nil {
		return nil, "", err
	}
	if key == "" {
		return nil, "", &Error{Path: join(path, "key"), Line: line(f, "key", n), Msg: "required: the table's primary key (a column, or a list of its columns)"}
	}
	if msg := checkIdentifier(key); msg != "" {
		return nil, "", &Error{Path: join(path, "key"), Line: line(f, "key", n), Msg: msg}
	}
	return []string{key}, key, nil
}

// SourceSpecs returns the file's sources as the sources package takes
// them, in the file's order.
func (c *Config) SourceSpecs() []sources.Spec {
	out := make([]sources.Spec, len(c.Sources))
	for i, s := range c.Sources {
		out[i] = s.Spec
	}
	return out
}

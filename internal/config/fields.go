package config

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"go.yaml.in/yaml/v3"
)

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// mapping returns n's fields, refusing duplicates and fields not in known.
func (p *parser) mapping(n *yaml.Node, path string, known []string) (map[string]*yaml.Node, error) {
	out := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		name := k.Value
		if _, dup := out[name]; dup {
			return nil, &Error{Path: join(path, name), Line: k.Line, Msg: "given twice"}
		}
		if !slices.Contains(known, name) {
			return nil, &Error{Path: path, Line: k.Line, Msg: fmt.Sprintf("unknown field %q (known: %s)", name, strings.Join(known, ", "))}
		}
		out[name] = v
	}
	return out, nil
}

// join appends a field to a path: "destinations.crm" + "url" with a dot,
// "sources[0] (orders)" + "key" with a colon.
func join(path, field string) string {
	switch {
	case path == "":
		return field
	case strings.HasPrefix(path, "destinations."):
		return path + "." + field
	default:
		return path + ": " + field
	}
}

// keyLine is the line of key in mapping n, else of n: a field given with
// nothing under it (its entries indented too little) is reported where it
// is written, not at the top of the file.
func keyLine(n *yaml.Node, key string) int {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i].Line
		}
	}
	return n.Line
}

func mappingValue(n *yaml.Node, key string) (*yaml.Node, bool) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1], true
		}
	}
	return nil, false
}

// line is the line of field f, else of its entry.
func line(f map[string]*yaml.Node, field string, entry *yaml.Node) int {
	if v, ok := f[field]; ok {
		return v.Line
	}
	return entry.Line
}

func str(f map[string]*yaml.Node, field, path string) (string, error) {
	v, ok := f[field]
	if !ok || isNull(v) {
		return "", nil
	}
	var s string
	if v.Kind != yaml.ScalarNode || v.Decode(&s) != nil {
		return "", &Error{Path: join(path, field), Line: v.Line, Msg: "must be a string"}
	}
	return s, nil
}

// positiveInt decodes an optional integer field that must be at least 1: 0
// when absent.
func positiveInt(f map[string]*yaml.Node, field, path string) (int, error) {
	v, ok := f[field]
	if !ok || isNull(v) {
		return 0, nil
	}
	var n int
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" || v.Decode(&n) != nil || n < 1 {
		return 0, &Error{Path: join(path, field), Line: v.Line, Msg: "must be a whole number, 1 or more"}
	}
	return n, nil
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// checkName accepts names made for logs, metrics labels and the command
// line: letters, digits and _ - . $, 1 to MaxName bytes.
func checkName(name string) string {
	if name == "" {
		return "must not be empty"
	}
	if len(name) > MaxName {
		return fmt.Sprintf("%q is longer than %d bytes", name, MaxName)
	}
	for _, r := range name {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) && !strings.ContainsRune("_-.$", r) {
			return fmt.Sprintf("%q may only hold letters, digits and _ - . $", name)
		}
	}
	return ""
}

// checkIdentifier accepts any name PostgreSQL can hold: the name is quoted
// wherever syncer uses it, so it is taken exactly as written (Orders is not
// orders).
func checkIdentifier(id string) string {
	switch {
	case id == "":
		return "must not be empty"
	case len(id) > MaxIdentifier:
		return fmt.Sprintf("is longer than %d bytes, which no PostgreSQL name can be", MaxIdentifier)
	case strings.ContainsRune(id, 0):
		return "must not hold a NUL byte"
	}
	return ""
}

package config

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Secret is a token. It prints as "[redacted]" whatever the verb, so a
// Destination can be logged or printed without leaking it.
type Secret string

// String hides the secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// GoString hides the secret from %#v.
func (s Secret) GoString() string { return `config.Secret("` + s.String() + `")` }

// LogValue hides the secret from slog.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalText hides the secret from encoders.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Reveal returns the token, for the Authorization header only.
func (s Secret) Reveal() string { return string(s) }

// SecretRef says where a secret of the file comes from: the environment
// variable its <field>_env names, or the file its <field>_file names
// (a mounted Kubernetes Secret, a Docker secret). At most one is set.
type SecretRef struct {
	// Env names the environment variable; empty when not given.
	Env string
	// File is the file's path; empty when not given.
	File string
}

// Given reports whether the file names a source for the secret.
func (r SecretRef) Given() bool { return r.Env != "" || r.File != "" }

// String names where the secret comes from, for messages: never the
// secret itself.
func (r SecretRef) String() string {
	switch {
	case r.Env != "":
		return "environment variable " + r.Env
	case r.File != "":
		return "file " + r.File
	}
	return "nothing"
}

// secret reads the secret field names through <field>_env or <field>_file
// of an entry whose fields are f, at path. Both given is an error naming
// the two fields. The secret itself is read only when the parser reads
// secrets (p.getenv set): a variable's surrounding space is trimmed; a
// file is read once, here, and one trailing newline (as echo and editors
// write) is not part of the secret. An unset variable, an unreadable or
// empty file is an error naming the field; no error quotes the secret.
// Every secret of a destination (token, signing secret) is read through
// it, so they all take the same two forms.
func (p *parser) secret(f map[string]*yaml.Node, entry *yaml.Node, path, field string) (SecretRef, Secret, error) {
	envField, fileField := field+"_env", field+"_file"
	var ref SecretRef
	var err error
	if ref.Env, err = str(f, envField, path); err != nil {
		return ref, "", err
	}
	if ref.File, err = str(f, fileField, path); err != nil {
		return ref, "", err
	}
	if ref.Env != "" && ref.File != "" {
		return ref, "", &Error{Path: join(path, fileField), Line: line(f, fileField, entry),
			Msg: fmt.Sprintf("%s and %s are exclusive: give one", envField, fileField)}
	}
	if ref.Env != "" && !envName.MatchString(ref.Env) {
		return ref, "", &Error{Path: join(path, envField), Line: line(f, envField, entry), Msg: "must be the name of an environment variable (letters, digits and _)"}
	}
	if !ref.Given() {
		return ref, "", nil
	}
	use := SecretUse{Path: path, Field: field, Ref: ref, Line: line(f, envField, entry)}
	if ref.File != "" {
		use.Line = line(f, fileField, entry)
	}
	p.secrets = append(p.secrets, use)
	if p.getenv == nil {
		return ref, "", nil
	}
	v, err := use.Read(p.getenv)
	if err != nil {
		return ref, "", err
	}
	return ref, v, nil
}

// SecretUse is one secret the file names: which entry and field, and
// where it comes from. `syncer config check` reads them all to say which
// are missing, without stopping at the first.
type SecretUse struct {
	// Path names the entry: "destinations.crm".
	Path string
	// Field is the secret's field without its suffix: "token".
	Field string
	// Ref is where the secret comes from.
	Ref SecretRef
	// Line is the line of its _env or _file field.
	Line int
}

// Read reads the secret: a variable's surrounding space is trimmed, a
// file's one trailing newline ignored. An unset or blank variable, an
// unreadable or empty file is an *Error naming the entry and field.
func (u SecretUse) Read(getenv func(string) string) (Secret, error) {
	if u.Ref.Env != "" {
		v := strings.TrimSpace(getenv(u.Ref.Env))
		if v == "" {
			return "", &Error{Path: join(u.Path, u.Field+"_env"), Line: u.Line, Msg: fmt.Sprintf("environment variable %s is not set or empty", u.Ref.Env)}
		}
		return Secret(v), nil
	}
	v, msg := ReadSecretFile(u.Ref.File)
	if msg != "" {
		return "", &Error{Path: join(u.Path, u.Field+"_file"), Line: u.Line, Msg: msg}
	}
	return Secret(v), nil
}

// ReadSecretFile reads a secret mounted as a file. One trailing newline is
// not part of the secret. It returns what is wrong as a message naming the
// file, never its contents.
func ReadSecretFile(path string) (string, string) {
	b, err := os.ReadFile(path)
	if err != nil {
		var pe *os.PathError
		switch {
		case errors.Is(err, os.ErrNotExist):
			return "", fmt.Sprintf("cannot read %s: no such file", path)
		case errors.Is(err, os.ErrPermission):
			return "", fmt.Sprintf("cannot read %s: permission denied", path)
		case errors.As(err, &pe):
			return "", fmt.Sprintf("cannot read %s: %v", path, pe.Err)
		}
		return "", fmt.Sprintf("cannot read %s", path)
	}
	s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if s == "" {
		return "", fmt.Sprintf("%s is empty", path)
	}
	return s, ""
}

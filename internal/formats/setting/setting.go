// Package setting is the seam a destination format plugs into: a format's
// package declares one Kind (its name, the fields it takes, how it reads
// them into its own typed settings, and how those settings build the
// format), and internal/formats lists every Kind once. The configuration
// file, the command line, `config check` and the daemon all read that
// list, so a new format is one package and one line, as an Alertmanager
// integration is one package under notify/ and one entry in its receiver
// table. A format that can be read back declares its reader beside its
// sender, in the same Kind (ReadBack, package readback).
//
// A format reads its fields through Fields, which the configuration
// implements over its YAML: every error it returns names the field as the
// file writes it (destinations.crm.request.body) and its line. Secrets are
// read once, the same way for every format and every destination (the
// file's and the one SYNCER_THIRDPARTY_* configures): Fields.Secret at
// load, Env.Secret at build, which re-reads a file when it changes.
package setting

import (
	"encoding/json"
	"strings"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/formats/readback"
)

// Kind is one format as the registry lists it.
type Kind struct {
	// Name is the format's name in configuration (`format: NAME`).
	Name string
	// Fields are the destination fields only this format takes; the
	// configuration refuses them with another format.
	Fields []string
	// Flags is set when the SYNCER_THIRDPARTY_* settings alone can
	// configure it (no field beyond a signing secret is required).
	Flags bool
	// Parse reads the format's fields into its settings, applying its
	// defaults and refusing what cannot work, with an error from
	// Fields.Errorf (or any error naming no field, put on `format`).
	Parse func(f Fields) (Settings, error)
	// ReadBack are the format's verify settings when it has a read API of
	// its own (`syncer verify` reads a destination back through them); nil
	// when it has none: only a verify block reads it back.
	ReadBack readback.Settings
}

// Settings are one format's typed settings, as its Parse read them.
type Settings interface {
	// Build makes the format. Every error is a *FieldError.
	Build(env *Env) (delivery.Format, error)
}

// Fields are a destination's fields as a format reads them. A field
// absent or null reads as its zero value.
type Fields interface {
	// String reads a string field.
	String(field string) (string, error)
	// Bool reads a true or false field; given says whether it was set.
	Bool(field string) (v, given bool, err error)
	// Mapping reads a field that is a mapping whose keys are among known;
	// nil when absent.
	Mapping(field string, known []string) (Fields, error)
	// Secret reads a secret given as FIELD_env or FIELD_file (exclusive),
	// recorded so that `config check` reports it.
	Secret(field string) (Secret, error)
	// Errorf is an error naming field (its path and line) with msg.
	Errorf(field, msg string) error
}

// Secret is where a secret comes from and its value when read.
type Secret struct {
	// Field is the field it was read from, without _env or _file
	// ("signing_secret").
	Field string
	// Env and File name where it is read from; at most one is set.
	Env, File string
	// Value is the secret, "" when not read (a config parsed without the
	// environment). Never logged.
	Value string
}

// Given reports whether the secret is configured.
func (s Secret) Given() bool { return s.Env != "" || s.File != "" || s.Value != "" }

// Env is what building a format may use beyond its settings.
type Env struct {
	// Installation is the installation's id (cloudevents' default source).
	// Defaults to "".
	Installation string
	// Secret, when set, gives a secret's value at each request (a file
	// read again when it changes; the daemon's credentials). Defaults to
	// nil: the Value read at load.
	Secret func(s Secret) (func() string, error)
}

// Value gives s at each request: through e.Secret when set, else its Value.
func (e *Env) Value(s Secret) (func() string, error) {
	if e != nil && e.Secret != nil && s.File != "" {
		return e.Secret(s)
	}
	v := s.Value
	return func() string { return v }, nil
}

// FieldError is a format setting that cannot work, naming its field as
// the configuration writes it ("format", "signing_secret_env",
// "request.body"...). It never quotes a secret.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string {
	if msg := e.Err.Error(); strings.HasPrefix(msg, e.Field+":") {
		return msg
	}
	return e.Field + ": " + e.Err.Error()
}
func (e *FieldError) Unwrap() error { return e.Err }

// String never shows the value: a secret printed with its settings (%v,
// %+v) says only where it comes from.
func (s Secret) String() string {
	switch {
	case s.Env != "":
		return "[redacted from env " + s.Env + "]"
	case s.File != "":
		return "[redacted from file " + s.File + "]"
	}
	return "[redacted]"
}

// GoString is String, for %#v.
func (s Secret) GoString() string { return s.String() }

// MarshalJSON is String too: settings marshalled (the daemon's digest of
// how a destination renders a body) never carry the value.
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

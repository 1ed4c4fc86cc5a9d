package cloudevents

import (
	"cmp"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/formats/setting"
)

// Kind registers the cloudevents format and its two attributes.
var Kind = setting.Kind{Name: Name, Flags: true, Fields: []string{"event_source", "event_type_prefix"}, Parse: parse}

// Settings are the cloudevents format's.
type Settings struct {
	// EventSource is every event's source attribute (event_source).
	// Defaults to "urn:syncer:<installation>:<source>".
	EventSource string
	// EventTypePrefix starts every event's type (event_type_prefix).
	// Defaults to "syncer.<source>".
	EventTypePrefix string
}

func parse(f setting.Fields) (setting.Settings, error) {
	var s Settings
	var err error
	if s.EventSource, err = f.String("event_source"); err != nil {
		return nil, err
	}
	if s.EventTypePrefix, err = f.String("event_type_prefix"); err != nil {
		return nil, err
	}
	if _, err := s.Build(nil); err != nil {
		return nil, f.Errorf("event_source", err.(*setting.FieldError).Err.Error())
	}
	return s, nil
}

// Build makes the format.
func (s Settings) Build(env *setting.Env) (delivery.Format, error) {
	installation := ""
	if env != nil {
		installation = env.Installation
	}
	f, err := New(&Config{Installation: cmp.Or(installation, "-"), EventSource: s.EventSource, EventTypePrefix: s.EventTypePrefix})
	if err != nil {
		return nil, &setting.FieldError{Field: "event_source", Err: err}
	}
	return f, nil
}

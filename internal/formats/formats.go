// Package formats builds a destination's format (CONTRACT.md section 6)
// from what its configuration says: one package per format under
// internal/formats, behind the one interface the delivery path uses
// (delivery.Format), as Alertmanager keeps one package per integration
// behind its Notifier. Keys, recording, limits, the breaker, backoff,
// splits and refusals are not a format's: they live once, in
// internal/delivery and internal/thirdparty, and hold for every format.
package formats

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/syncer-dev/syncer/internal/formats/cloudevents"
	"github.com/syncer-dev/syncer/internal/formats/custom"
	"github.com/syncer-dev/syncer/internal/formats/elasticsearch"
	"github.com/syncer-dev/syncer/internal/formats/standardwebhooks"
	"github.com/syncer-dev/syncer/internal/formats/syncer"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// Format is what every format is: how a batch becomes requests and how an
// answer to one is read (see delivery.Format).
type Format interface {
	Requests(b *thirdparty.Batch) ([]thirdparty.Request, error)
	Read(r *thirdparty.Request, a *thirdparty.Answer) (*thirdparty.Result, error)
}

var (
	_ Format = syncer.Format{}
	_ Format = elasticsearch.Format{}
	_ Format = (*cloudevents.Format)(nil)
	_ Format = (*standardwebhooks.Format)(nil)
	_ Format = (*custom.Format)(nil)
)

// Names are the formats a destination may name, the default first.
var Names = []string{syncer.Name, standardwebhooks.Name, cloudevents.Name, elasticsearch.Name, custom.Name}

// Spec is what a destination's configuration says of its format.
type Spec struct {
	// Name is the format. Defaults to "syncer".
	Name string
	// SigningSecret signs standard-webhooks requests: "whsec_" and base64.
	// Required by standard-webhooks. Never logged. Defaults to "".
	SigningSecret string
	// EventSource and EventTypePrefix are cloudevents' attributes.
	// Default to the cloudevents package's defaults.
	EventSource, EventTypePrefix string
	// Custom is the custom format's programs. Defaults to the zero value.
	Custom custom.Config
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

// New builds the format spec names. installation is the installation's
// id (cloudevents' default source). Every error is a *FieldError.
func New(spec *Spec, installation string) (Format, error) {
	switch spec.Name {
	case "", syncer.Name:
		return syncer.Format{}, nil
	case elasticsearch.Name:
		return elasticsearch.Format{}, nil
	case cloudevents.Name:
		f, err := cloudevents.New(&cloudevents.Config{Installation: cmp.Or(installation, "-"),
			EventSource: spec.EventSource, EventTypePrefix: spec.EventTypePrefix})
		if err != nil {
			return nil, &FieldError{Field: "event_source", Err: err}
		}
		return f, nil
	case standardwebhooks.Name:
		if spec.SigningSecret == "" {
			return nil, &FieldError{Field: "signing_secret_env", Err: fmt.Errorf("required by %s (or signing_secret_file)", standardwebhooks.Name)}
		}
		f, err := standardwebhooks.New(spec.SigningSecret)
		if err != nil {
			return nil, &FieldError{Field: "signing_secret_env", Err: err}
		}
		return f, nil
	case custom.Name:
		f, err := custom.New(&spec.Custom)
		if err != nil {
			return nil, &FieldError{Field: fieldOf(err), Err: err}
		}
		return f, nil
	}
	return nil, &FieldError{Field: "format", Err: fmt.Errorf("unknown format %q (known: %v)", spec.Name, Names)}
}

// Known reports whether name is a format.
func Known(name string) bool { return name == "" || slices.Contains(Names, name) }

// fieldOf is the field a custom error starts with ("request.body: ...").
func fieldOf(err error) string {
	if field, _, ok := strings.Cut(err.Error(), ":"); ok && !strings.Contains(field, " ") {
		return field
	}
	return "request"
}

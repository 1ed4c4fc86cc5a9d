// Package formatstest is a destination format that exists for tests only:
// it shows what adding a format takes, one package like this one and one
// registration (formats.Default().With(formatstest.Kind) in a test; a
// line in internal/formats' table for a real one). No production package
// imports it, so it is not in the binary.
//
// The format, "greeting", has one setting, `greeting` (one word, default
// "hello"), and sends each batch as one POST {url}/greetings whose JSON
// body is {"greeting": ..., "source": ..., "ids": [...]}; any 2xx accepts
// the batch, anything else is read by the common rules.
package formatstest

import (
	"encoding/json"
	"strings"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/formats/setting"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// Name is the format's name in configuration.
const Name = "greeting"

// GreetingDefault is the greeting of a destination that names none.
const GreetingDefault = "hello"

// Kind registers the format: its one field and its parsing.
var Kind = setting.Kind{Name: Name, Flags: true, Fields: []string{"greeting"}, Parse: parse}

// Settings are the greeting format's.
type Settings struct {
	// Greeting opens every body (`greeting`), one word. Defaults to
	// GreetingDefault.
	Greeting string
}

func parse(f setting.Fields) (setting.Settings, error) {
	g, err := f.String("greeting")
	if err != nil {
		return nil, err
	}
	if g == "" {
		g = GreetingDefault
	}
	if strings.ContainsAny(g, " \t\r\n") {
		return nil, f.Errorf("greeting", "must be one word, such as hello")
	}
	return Settings{Greeting: g}, nil
}

// Build makes the format.
func (s Settings) Build(*setting.Env) (delivery.Format, error) { return format(s), nil }

type format Settings

// Body is a request's body as the format writes it.
type Body struct {
	Greeting string   `json:"greeting"`
	Source   string   `json:"source"`
	IDs      []string `json:"ids"`
}

// Path is where every request goes, under the destination's URL.
const Path = "/greetings"

func (f format) Requests(b *thirdparty.Batch) ([]thirdparty.Request, error) {
	ids := make([]string, len(b.Items))
	for i := range b.Items {
		ids[i] = b.Items[i].ID
	}
	body, err := json.Marshal(Body{Greeting: f.Greeting, Source: b.Source, IDs: ids})
	if err != nil {
		return nil, err
	}
	return []thirdparty.Request{{Path: Path, ContentType: "application/json", Body: body, IDs: ids, Items: b.Items}}, nil
}

func (format) Read(_ *thirdparty.Request, a *thirdparty.Answer) (*thirdparty.Result, error) {
	if !a.OK() {
		return nil, a.Refusal()
	}
	return &thirdparty.Result{}, nil
}

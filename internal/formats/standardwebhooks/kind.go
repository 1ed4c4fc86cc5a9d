package standardwebhooks

import (
	"fmt"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/formats/setting"
)

// Kind registers the standard-webhooks format and its signing secret.
var Kind = setting.Kind{Name: Name, Flags: true, Fields: []string{"signing_secret_env", "signing_secret_file"}, Parse: parse}

// Settings are the standard-webhooks format's.
type Settings struct {
	// SigningSecret signs every request: "whsec_" and base64, or several
	// such separated by spaces while a secret rotates. Required. Never
	// logged.
	SigningSecret setting.Secret
}

func parse(f setting.Fields) (setting.Settings, error) {
	sec, err := f.Secret("signing_secret")
	if err != nil {
		return nil, err
	}
	if !sec.Given() {
		return nil, f.Errorf("signing_secret_env", "required by format "+Name+" (or signing_secret_file)")
	}
	// Without the environment (no value read) the secret's form is not
	// checked here; config check reads it.
	if sec.Value != "" {
		if _, err := New(sec.Value); err != nil {
			return nil, f.Errorf(secretField(sec), err.Error())
		}
	}
	return Settings{SigningSecret: sec}, nil
}

// secretField is the field s was read from.
func secretField(s setting.Secret) string {
	if s.File != "" {
		return "signing_secret_file"
	}
	return "signing_secret_env"
}

// Build makes the format, signing with the secret of the moment when
// env re-reads it (a file).
func (s Settings) Build(env *setting.Env) (delivery.Format, error) {
	sec := s.SigningSecret
	if sec.File == "" && sec.Value == "" {
		return nil, &setting.FieldError{Field: "signing_secret_env", Err: fmt.Errorf("required by %s (or signing_secret_file)", Name)}
	}
	get, err := env.Value(sec)
	if err != nil {
		return nil, &setting.FieldError{Field: secretField(sec), Err: err}
	}
	f, err := NewRotating(get)
	if err != nil {
		return nil, &setting.FieldError{Field: secretField(sec), Err: err}
	}
	if env == nil || env.Secret == nil || sec.File == "" {
		f.get = nil // a value read once: no reason to ask again
	}
	return f, nil
}

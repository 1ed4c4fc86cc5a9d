package syncer

import (
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/formats/setting"
)

// Kind registers the syncer format: it takes no field, and is read back
// through its read API (ReadBack).
var Kind = setting.Kind{Name: Name, Flags: true,
	Parse:    func(setting.Fields) (setting.Settings, error) { return Settings{}, nil },
	ReadBack: ReadBack}

// Settings are the syncer format's: none.
type Settings struct{}

// Build makes the format.
func (Settings) Build(*setting.Env) (delivery.Format, error) { return Format{}, nil }

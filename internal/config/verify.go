package config

import (
	"time"

	"go.yaml.in/yaml/v3"
)

// MinVerifyEvery is the shortest verify_every: a period shorter than a
// minute would make background verification a second export.
const MinVerifyEvery = time.Minute

// verifyFields reads a destination's background verification: verify_every
// (a Go duration such as 24h) and verify_heal.
func (p *parser) verifyFields(d *Destination, f map[string]*yaml.Node, path string) error {
	if v, ok := f["verify_every"]; ok && !isNull(v) {
		var s string
		every, err := time.Duration(0), error(nil)
		if v.Kind == yaml.ScalarNode && v.Decode(&s) == nil {
			every, err = time.ParseDuration(s)
		}
		if v.Kind != yaml.ScalarNode || err != nil || every < MinVerifyEvery {
			return &Error{Path: join(path, "verify_every"), Line: v.Line,
				Msg: "must be a duration of at least 1m, such as 24h or 30m (how often the daemons verify every source of the destination)"}
		}
		d.VerifyEvery = every
	}
	if v, ok := f["verify_heal"]; ok && !isNull(v) {
		if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool" || v.Decode(&d.VerifyHeal) != nil {
			return &Error{Path: join(path, "verify_heal"), Line: v.Line, Msg: "must be true or false"}
		}
		if d.VerifyEvery == 0 {
			return &Error{Path: join(path, "verify_heal"), Line: v.Line, Msg: "needs verify_every: it heals what the background verification finds"}
		}
	}
	return nil
}

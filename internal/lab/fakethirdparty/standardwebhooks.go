package fakethirdparty

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/syncer-dev/syncer/internal/formats/standardwebhooks"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// signatureTolerance is how far a webhook-timestamp may be from the fake's
// clock, as the specification's libraries allow.
const signatureTolerance = 5 * time.Minute

// decodeWebhook verifies a Standard Webhooks request's signature with
// Config.SigningSecret and reads its one item.
func decodeWebhook(s *Server, cfg Config, r *http.Request, body []byte) ([]thirdparty.Item, error) {
	if cfg.SigningSecret != "" {
		key, err := standardwebhooks.ParseSecret(cfg.SigningSecret)
		if err != nil {
			return nil, errSignature{errors.New("fake: the signing secret is not whsec_ and base64")}
		}
		id, ts := r.Header.Get("Webhook-Id"), r.Header.Get("Webhook-Timestamp")
		sec, err := strconv.ParseInt(ts, 10, 64)
		if id == "" || err != nil {
			return nil, errSignature{errors.New("webhook-id and webhook-timestamp are required")}
		}
		if d := s.now().Sub(time.Unix(sec, 0)); d > signatureTolerance || d < -signatureTolerance {
			return nil, errSignature{errors.New("webhook-timestamp is too far from now")}
		}
		want := standardwebhooks.Signature(key, id, ts, body)
		ok := false
		for _, sig := range strings.Fields(r.Header.Get("Webhook-Signature")) {
			if sig == want {
				ok = true
			}
		}
		if !ok {
			return nil, errSignature{errors.New("no valid webhook-signature")}
		}
	}
	var m struct {
		Type      string `json:"type"`
		Timestamp string `json:"timestamp"`
		Data      struct {
			ID      string          `json:"id"`
			Version int64           `json:"version"`
			Payload json.RawMessage `json:"payload"`
			Deleted bool            `json:"deleted"`
		} `json:"data"`
	}
	if err := strictJSON(body, &m); err != nil {
		return nil, err
	}
	if _, err := time.Parse(time.RFC3339, m.Timestamp); err != nil {
		return nil, fmt.Errorf("timestamp %q is not RFC 3339", m.Timestamp)
	}
	if m.Data.Deleted != strings.HasSuffix(m.Type, ".deleted") || (!m.Data.Deleted && !strings.HasSuffix(m.Type, ".upserted")) {
		return nil, fmt.Errorf("type %q does not match the data", m.Type)
	}
	return []thirdparty.Item{{ID: m.Data.ID, Version: m.Data.Version, Payload: m.Data.Payload, Deleted: m.Data.Deleted}}, nil
}

// errSignature is a request whose signature does not verify: 401.
type errSignature struct{ error }

package fakethirdparty

import (
	"encoding/json"
	"io"
	"net/http"
)

// handleEchoToken serves POST /oauth/token with Config.EchoAuthorization:
// every grant refused, 401 invalid_client, its description quoting the
// request's Authorization header (a Basic header's base64 of the client's
// id and secret) and its form (a refresh token, URL-encoded), as a token
// endpoint that shows what it was sent does. 404 without the knob.
func (s *Server) handleEchoToken(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	on := s.cfg.EchoAuthorization
	s.mu.Unlock()
	if !on {
		writeJSON(w, http.StatusNotFound, errorBody("no token endpoint: start the fake with EchoAuthorization (--echo-authorization)"))
		return
	}
	form, _ := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	b, _ := json.Marshal(struct {
		Error       string `json:"error"`
		Description string `json:"error_description"`
	}{"invalid_client", "you sent Authorization: " + r.Header.Get("Authorization") + " with the form " + string(form)})
	writeJSON(w, http.StatusUnauthorized, b)
}

// echoedLocked is payload as a lookup answers it: with
// Config.EchoAuthorization, an object gains "seen_authorization", the
// lookup's Authorization header, as a third party that stores what it was
// sent with a record and shows it back.
func (s *Server) echoedLocked(payload []byte, r *http.Request) []byte {
	if !s.cfg.EchoAuthorization {
		return payload
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(payload, &obj) != nil || obj == nil {
		return payload
	}
	obj["seen_authorization"], _ = json.Marshal(r.Header.Get("Authorization"))
	out, err := json.Marshal(obj)
	if err != nil {
		return payload
	}
	return out
}

// Package standardwebhooks is the destination format of the Standard
// Webhooks specification (https://www.standardwebhooks.com, CONTRACT.md
// section 6): one signed request per item, POST {url}.
//
// What it guarantees: an item's body is a function of the item and the
// batch's recorded time, and its webhook-id is the request's
// Idempotency-Key (a hash of that body), so a resend after a crash is the
// same webhook-id with the same body; only webhook-timestamp and
// webhook-signature are made fresh on every send, as the specification
// wants (receivers refuse stale timestamps). The secret is never logged
// nor put in an error.
package standardwebhooks

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// Name is the format's name in configuration.
const Name = "standard-webhooks"

// SecretPrefix starts a secret in the specification's form.
const SecretPrefix = "whsec_"

// ErrSecret is a signing secret not of the form whsec_<base64>. Its text
// never quotes the secret.
var ErrSecret = errors.New("standardwebhooks: the signing secret must be " + SecretPrefix + " followed by base64")

// ParseSecret returns the key bytes of a secret written as the
// specification writes it: "whsec_" and the base64 of the key.
func ParseSecret(secret string) ([]byte, error) {
	b64, ok := strings.CutPrefix(strings.TrimSpace(secret), SecretPrefix)
	if !ok || b64 == "" {
		return nil, ErrSecret
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		if key, err = base64.RawStdEncoding.DecodeString(b64); err != nil {
			return nil, ErrSecret
		}
	}
	if len(key) == 0 {
		return nil, ErrSecret
	}
	return key, nil
}

// Format is the standard-webhooks format.
type Format struct {
	key []byte
}

// New returns the format signing with secret ("whsec_" and base64).
func New(secret string) (*Format, error) {
	key, err := ParseSecret(secret)
	if err != nil {
		return nil, err
	}
	return &Format{key: key}, nil
}

// Requests makes one request per item.
func (f *Format) Requests(b *thirdparty.Batch) ([]thirdparty.Request, error) {
	upserted, _ := json.Marshal(b.Source + ".upserted") // strings always marshal
	deleted, _ := json.Marshal(b.Source + ".deleted")
	at, _ := json.Marshal(b.Time.UTC().Format(time.RFC3339Nano))
	reqs := make([]thirdparty.Request, len(b.Items))
	var num [20]byte
	for i := range b.Items {
		it := &b.Items[i]
		id := it.ID
		buf := bytes.NewBuffer(make([]byte, 0, 120+len(it.Payload)))
		buf.WriteString(`{"type":`)
		if it.Deleted {
			buf.Write(deleted)
		} else {
			buf.Write(upserted)
		}
		buf.WriteString(`,"timestamp":`)
		buf.Write(at)
		buf.WriteString(`,"data":{"id":`)
		buf.Write(thirdparty.AppendString(nil, id))
		buf.WriteString(`,"version":`)
		buf.Write(strconv.AppendInt(num[:0], it.Version, 10))
		if it.Deleted {
			buf.WriteString(`,"deleted":true}}`)
		} else {
			buf.WriteString(`,"payload":`)
			if len(it.Payload) == 0 {
				buf.WriteString("null")
			} else {
				buf.Write(it.Payload)
			}
			buf.WriteString(`}}`)
		}
		body := buf.Bytes()
		reqs[i] = thirdparty.Request{
			ContentType: "application/json", Body: body,
			IDs: []string{id}, Items: b.Items[i : i+1 : i+1],
			Sign: func(h http.Header, key string, now time.Time) { f.sign(h, key, body, now) },
		}
	}
	return reqs, nil
}

// sign sets the three webhook headers for one send.
func (f *Format) sign(h http.Header, id string, body []byte, now time.Time) {
	ts := strconv.FormatInt(now.Unix(), 10)
	h["Webhook-Id"] = []string{id}
	h["Webhook-Timestamp"] = []string{ts}
	h["Webhook-Signature"] = []string{Signature(f.key, id, ts, body)}
}

// Signature is the specification's v1 signature of a message: "v1," and
// the base64 HMAC-SHA256 of "{id}.{timestamp}.{body}" keyed with key.
func Signature(key []byte, id, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write([]byte(timestamp))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// Read takes a 2xx as accepting the item, rejects it on a 4xx the
// contract does not name (400, 422 and the like) with the answer's text,
// and reads any other status by the common rules.
func (f *Format) Read(r *thirdparty.Request, a *thirdparty.Answer) (*thirdparty.Result, error) {
	if a.OK() {
		return &thirdparty.Result{}, nil
	}
	switch s := a.StatusCode; {
	case s < 400 || s >= 500:
	case s == http.StatusUnauthorized, s == http.StatusForbidden, s == http.StatusNotFound, s == http.StatusGone,
		s == http.StatusRequestTimeout, s == http.StatusConflict, s == http.StatusRequestEntityTooLarge,
		s == http.StatusTooManyRequests:
	default:
		res := &thirdparty.Result{}
		for _, id := range r.IDs {
			res.Rejected = append(res.Rejected, thirdparty.Rejection{ID: id, Error: a.RefusalText()})
		}
		return res, nil
	}
	return nil, a.Refusal()
}

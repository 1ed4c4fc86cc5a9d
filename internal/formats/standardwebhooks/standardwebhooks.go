// Package standardwebhooks is the destination format of the Standard
// Webhooks specification (https://www.standardwebhooks.com, docs/protocol.md
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
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

// ParseSecrets returns the keys of one or more secrets separated by
// spaces, as a rotation has them: requests are signed with each, and the
// receiver accepts any (webhook-signature carries several, space
// separated).
func ParseSecrets(secrets string) ([][]byte, error) {
	fields := strings.Fields(secrets)
	if len(fields) == 0 {
		return nil, ErrSecret
	}
	keys := make([][]byte, 0, len(fields))
	for _, f := range fields {
		k, err := ParseSecret(f)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// Format is the standard-webhooks format.
type Format struct {
	// get returns the secrets of the moment, for a secret read from a file
	// that rotates; nil for secrets fixed at New.
	get  func() string
	keys atomic.Pointer[keySet]
}

// keySet is the keys of one value of the secrets, with their pooled HMAC
// states.
type keySet struct {
	raw  string
	macs []*sync.Pool
}

func newKeySet(raw string, keys [][]byte) *keySet {
	ks := &keySet{raw: raw}
	for _, k := range keys {
		// macs keeps HMAC states keyed with k between sends (*signer): a
		// signature is made per request and attempt, and a fresh HMAC is
		// three allocations and two hashes of the key.
		ks.macs = append(ks.macs, &sync.Pool{New: func() any { return &signer{mac: hmac.New(sha256.New, k)} }})
	}
	return ks
}

// New returns the format signing with secret ("whsec_" and base64), or
// with each of several such secrets separated by spaces.
func New(secret string) (*Format, error) {
	keys, err := ParseSecrets(secret)
	if err != nil {
		return nil, err
	}
	f := &Format{}
	f.keys.Store(newKeySet(secret, keys))
	return f, nil
}

// NewRotating returns the format signing with the secrets get returns at
// each request (a file read again when it changes). A value that does not
// parse keeps the keys of the last one that did.
func NewRotating(get func() string) (*Format, error) {
	f, err := New(get())
	if err != nil {
		return nil, err
	}
	f.get = get
	return f, nil
}

// current returns the keys to sign with now.
func (f *Format) current() *keySet {
	ks := f.keys.Load()
	if f.get == nil {
		return ks
	}
	if raw := f.get(); raw != ks.raw {
		if keys, err := ParseSecrets(raw); err == nil {
			ks = newKeySet(raw, keys)
			f.keys.Store(ks)
		}
	}
	return ks
}

// Requests makes one request per item. The bodies share one allocation,
// and every request is signed by the same function.
func (f *Format) Requests(b *thirdparty.Batch) ([]thirdparty.Request, error) {
	upserted, _ := json.Marshal(b.Source + ".upserted") // strings always marshal
	deleted, _ := json.Marshal(b.Source + ".deleted")
	at, _ := json.Marshal(b.Time.UTC().Format(time.RFC3339Nano))
	size := 0
	for i := range b.Items {
		size += 120 + len(upserted) + len(at) + len(b.Items[i].ID) + len(b.Items[i].Payload)
	}
	buf := make([]byte, 0, size)
	reqs := make([]thirdparty.Request, len(b.Items))
	ids := make([]string, len(b.Items))
	for i := range b.Items {
		it := &b.Items[i]
		start := len(buf)
		buf = append(buf, `{"type":`...)
		if it.Deleted {
			buf = append(buf, deleted...)
		} else {
			buf = append(buf, upserted...)
		}
		buf = append(buf, `,"timestamp":`...)
		buf = append(buf, at...)
		buf = append(buf, `,"data":{"id":`...)
		buf = thirdparty.AppendString(buf, it.ID)
		buf = append(buf, `,"version":`...)
		buf = strconv.AppendInt(buf, it.Version, 10)
		if it.Deleted {
			buf = append(buf, `,"deleted":true}}`...)
		} else {
			buf = append(buf, `,"payload":`...)
			if len(it.Payload) == 0 {
				buf = append(buf, "null"...)
			} else {
				buf = append(buf, it.Payload...)
			}
			buf = append(buf, `}}`...)
		}
		ids[i] = it.ID
		reqs[i] = thirdparty.Request{
			ContentType: "application/json",
			// A full slice: nothing appended to one body can reach the next
			// (the estimate above only saves growing the buffer).
			Body: buf[start:len(buf):len(buf)],
			IDs:  ids[i : i+1 : i+1], Items: b.Items[i : i+1 : i+1],
			PerItem: true,
			Sign:    f.sign,
		}
	}
	return reqs, nil
}

// sign sets the three webhook headers for one send, with a signature per
// secret.
func (f *Format) sign(h http.Header, id string, body []byte, now time.Time) {
	ks := f.current()
	var ts string
	var first [3 + 44]byte
	var sigs []byte // only for several secrets: one costs no allocation more
	for i, pool := range ks.macs {
		s := pool.Get().(*signer)
		mac := s.mac
		mac.Reset()
		// "{id}.{timestamp}." in one write, then the body.
		p := append(append(s.pre[:0], id...), '.')
		p = strconv.AppendInt(p, now.Unix(), 10)
		if i == 0 {
			ts = string(p[len(id)+1:])
		}
		_, _ = mac.Write(append(p, '.'))
		_, _ = mac.Write(body)
		var sig [3 + 44]byte // "v1," and the base64 of 32 bytes
		copy(sig[:], "v1,")
		base64.StdEncoding.Encode(sig[3:], mac.Sum(s.sum[:0]))
		switch {
		case i == 0:
			first = sig
		case i == 1:
			sigs = append(append(append(sigs, first[:]...), ' '), sig[:]...)
		default:
			sigs = append(append(sigs, ' '), sig[:]...)
		}
		s.pre = p[:0]
		pool.Put(s)
	}
	// One array holds the three values: three headers, one allocation.
	sig := string(sigs)
	if len(ks.macs) == 1 {
		sig = string(first[:])
	}
	vals := [...]string{id, ts, sig}
	h["Webhook-Id"] = vals[0:1:1]
	h["Webhook-Timestamp"] = vals[1:2:2]
	h["Webhook-Signature"] = vals[2:3:3]
}

// signer is a pooled HMAC state with the scratch it is fed from: a buffer
// written to a hash.Hash escapes, so one on the stack would be a heap
// allocation per signature.
type signer struct {
	mac hash.Hash
	pre []byte
	sum [sha256.Size]byte
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

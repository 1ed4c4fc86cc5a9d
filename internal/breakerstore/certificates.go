package breakerstore

import (
	"context"
	"time"
)

// KeyCertificates holds Certificates: when a destination's TLS files end.
const KeyCertificates = "certificates"

// Certificates says when the first certificate of a destination's tls
// files (its CA or its client certificate) stops being valid, as the
// daemon that reads them last saw it: status says it from the database
// alone, like every other fact of a destination.
type Certificates struct {
	// What names the certificate: "cert_file /path" or "ca_file /path".
	What     string    `json:"what"`
	NotAfter time.Time `json:"not_after"`
	// Seen is when a daemon last read it.
	Seen time.Time `json:"seen"`
}

// SetCertificates records the destination's first certificate expiry.
func (s *Store) SetCertificates(ctx context.Context, c Certificates) error {
	if c.Seen.IsZero() {
		c.Seen = s.now().UTC()
	}
	return s.put(ctx, KeyCertificates, c)
}

package credentials

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"
)

// TLSFiles are a destination's TLS settings.
type TLSFiles struct {
	// CAFile holds PEM certificates of the CAs that may sign the server's
	// certificate; "" for the system's roots alone.
	CAFile string
	// CAOnly makes CAFile's certificates the only roots; by default they
	// are added to the system's.
	CAOnly bool
	// CertFile and KeyFile are a client certificate and its key, PEM; both
	// or neither.
	CertFile, KeyFile string
	// ServerName is the name the server's certificate must carry, when it
	// is not the URL's host.
	ServerName string
	// MinVersion is the lowest TLS version spoken: tls.VersionTLS12 when 0.
	MinVersion uint16
}

// TLS is a destination's TLS, its files read again when they change.
type TLS struct {
	files           TLSFiles
	ca, cert, key   *Secret
	mu              sync.Mutex
	caPEM           string
	roots           *x509.CertPool
	caCerts         []*x509.Certificate
	certPEM, keyPEM string
	pair            *tls.Certificate
}

// TLS reads and checks the files of f now: a file that cannot be read or
// parsed is an error naming it.
func (st *Set) TLS(name string, f TLSFiles) (*TLS, error) {
	if (f.CertFile == "") != (f.KeyFile == "") {
		return nil, fmt.Errorf("%s: cert_file and key_file go together", name)
	}
	t := &TLS{files: f}
	var err error
	if f.CAFile != "" {
		if t.ca, err = st.FromFile(name+": ca_file", f.CAFile); err != nil {
			return nil, err
		}
		if err := t.loadRoots(); err != nil {
			return nil, fmt.Errorf("%s: ca_file %s: %w", name, f.CAFile, err)
		}
	}
	if f.CertFile != "" {
		if t.cert, err = st.FromFile(name+": cert_file", f.CertFile); err != nil {
			return nil, err
		}
		if t.key, err = st.FromFile(name+": key_file", f.KeyFile); err != nil {
			return nil, err
		}
		if err := t.loadPair(); err != nil {
			return nil, fmt.Errorf("%s: cert_file %s and key_file %s: %w", name, f.CertFile, f.KeyFile, err)
		}
	}
	return t, nil
}

// loadRoots parses the CA file when its content changed.
func (t *TLS) loadRoots() error {
	pemText := t.ca.Value()
	t.mu.Lock()
	defer t.mu.Unlock()
	if pemText == t.caPEM && t.roots != nil {
		return nil
	}
	var certs []*x509.Certificate
	rest := []byte(pemText)
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return err
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return errors.New("holds no PEM certificate")
	}
	var pool *x509.CertPool
	if !t.files.CAOnly {
		if sys, err := x509.SystemCertPool(); err == nil {
			pool = sys.Clone()
		}
	}
	if pool == nil {
		pool = x509.NewCertPool()
	}
	for _, c := range certs {
		pool.AddCert(c)
	}
	t.caPEM, t.roots, t.caCerts = pemText, pool, certs
	return nil
}

// loadPair parses the client certificate when its files changed.
func (t *TLS) loadPair() error {
	certPEM, keyPEM := t.cert.Value(), t.key.Value()
	t.mu.Lock()
	defer t.mu.Unlock()
	if certPEM == t.certPEM && keyPEM == t.keyPEM && t.pair != nil {
		return nil
	}
	pair, err := tls.X509KeyPair([]byte(certPEM), []byte(keyPEM))
	if err != nil {
		// A certificate written before its key (or the other way) is seen
		// between two writes: keep the pair in use.
		if t.pair != nil {
			return nil
		}
		return errors.New("not a matching PEM certificate and key")
	}
	t.certPEM, t.keyPEM, t.pair = certPEM, keyPEM, &pair
	return nil
}

// Config returns the tls.Config of the destination's requests: it asks
// for the client certificate and the roots at each handshake, so files
// replaced under a running daemon are used from the next connection.
func (t *TLS) Config() *tls.Config {
	cfg := &tls.Config{MinVersion: max(t.files.MinVersion, tls.VersionTLS12), ServerName: t.files.ServerName}
	if t.cert != nil {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			_ = t.loadPair()
			t.mu.Lock()
			defer t.mu.Unlock()
			return t.pair, nil
		}
	}
	if t.ca != nil {
		// The roots change with the file, so the verification is the
		// standard library's, done here with the roots of the moment:
		// InsecureSkipVerify only hands it over to VerifyConnection, which
		// Go calls for every handshake.
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if err := t.loadRoots(); err != nil {
				return err
			}
			t.mu.Lock()
			roots := t.roots
			t.mu.Unlock()
			if len(cs.PeerCertificates) == 0 {
				return errors.New("tls: the server sent no certificate")
			}
			opts := x509.VerifyOptions{Roots: roots, DNSName: cs.ServerName, Intermediates: x509.NewCertPool()}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(opts)
			return err
		}
	}
	return cfg
}

// Expiry is when one certificate of a destination's files stops being
// valid.
type Expiry struct {
	// What names it: "cert_file /path" or "ca_file /path".
	What     string
	NotAfter time.Time
}

// Expiries lists the certificates of the files, soonest first.
func (t *TLS) Expiries() []Expiry {
	if t == nil {
		return nil
	}
	var out []Expiry
	if t.ca != nil && t.loadRoots() == nil {
		t.mu.Lock()
		for _, c := range t.caCerts {
			out = append(out, Expiry{What: "ca_file " + t.files.CAFile, NotAfter: c.NotAfter})
		}
		t.mu.Unlock()
	}
	if t.cert != nil && t.loadPair() == nil {
		t.mu.Lock()
		if t.pair != nil && len(t.pair.Certificate) > 0 {
			if c, err := x509.ParseCertificate(t.pair.Certificate[0]); err == nil {
				out = append(out, Expiry{What: "cert_file " + t.files.CertFile, NotAfter: c.NotAfter})
			}
		}
		t.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].NotAfter.Before(out[j].NotAfter) })
	return out
}

// ExpiringWithin is ExpiryWarningDefault: certificates that end sooner are
// said in status and the log.
const ExpiryWarningDefault = 14 * 24 * time.Hour

package soak

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// The modes of a proxy.
const (
	proxyPass      int32 = iota // bytes flow both ways
	proxyBlackhole              // connections stay open and carry nothing, as a dead route does
)

// proxy is a TCP proxy between one daemon and PostgreSQL, so that daemon
// alone can lose its database (black-holed, or every connection reset)
// while it keeps reaching the API.
type proxy struct {
	ln     net.Listener
	target string
	mode   atomic.Int32

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func newProxy(target string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go p.accept()
	return p, nil
}

func (p *proxy) port() int { return p.ln.Addr().(*net.TCPAddr).Port }

func (p *proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(c)
	}
}

func (p *proxy) track(c net.Conn, add bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
}

func (p *proxy) serve(client net.Conn) {
	p.track(client, true)
	defer p.track(client, false)
	defer client.Close()
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	p.track(server, true)
	defer p.track(server, false)
	defer server.Close()
	done := make(chan struct{}, 2)
	go func() { p.pipe(server, client); done <- struct{}{} }()
	go func() { p.pipe(client, server); done <- struct{}{} }()
	<-done
}

// pipe copies src to dst, holding every byte while the proxy black-holes.
func (p *proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		for n > 0 && p.mode.Load() == proxyBlackhole {
			time.Sleep(50 * time.Millisecond)
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				return
			}
			return
		}
	}
}

// blackhole holds every byte, both ways, for d; connections stay open.
func (p *proxy) blackhole(d time.Duration) {
	p.mode.Store(proxyBlackhole)
	time.AfterFunc(d, func() { p.mode.Store(proxyPass) })
}

// reset cuts every connection through the proxy with a TCP reset.
func (p *proxy) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
}

func (p *proxy) close() {
	_ = p.ln.Close()
	p.reset()
}

// Command konnectivity-go-client is a small test client built on the real Go
// konnectivity-client library (sigs.k8s.io/apiserver-network-proxy/konnectivity-client).
// It is used only as an interop test peer / benchmark baseline for cluster-proxy.
//
// It does what the OCM cluster-proxy README shows: one single-use gRPC tunnel
// per request (konnectivity.CreateSingleUseGrpcTunnel) over mTLS (or a Unix
// socket with insecure credentials), then dials the target through
// tunnel.DialContext.
//
// Modes:
//
//	--mode=http (default): GET --url through the tunnel, print the body to stdout.
//	    With --count N --concurrency C: N tunnels, C at a time, summary line on stdout.
//	--mode=tcp: dial --address through the tunnel, copy stdin -> conn and conn -> stdout.
//	--mode=firstbyte: --count times, one after another: a new single-use tunnel, dial
//	    --address (an echo server), write one byte, read one byte; prints
//	    "first-byte-ms" and each time from the tunnel's creation to that byte (bench/).
//
// Exit codes: 0 success, 1 failure (error text on stderr), 2 usage error.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	konnectivity "sigs.k8s.io/apiserver-network-proxy/konnectivity-client/pkg/client"
)

const prog = "konnectivity-go-client"

type options struct {
	proxyHost     string
	proxyPort     int
	caCert        string
	clientCert    string
	clientKey     string
	tlsServerName string
	uds           string

	mode        string
	url         string
	method      string
	address     string
	count       int
	concurrency int
	timeout     time.Duration
	allowStatus bool
	quiet       bool

	stdinEOF    string
	expectBytes int64
}

func main() {
	o := &options{}
	fs := flag.NewFlagSet(prog, flag.ContinueOnError)
	fs.StringVar(&o.proxyHost, "proxy-host", "127.0.0.1", "proxy server host (gRPC frontend)")
	fs.IntVar(&o.proxyPort, "proxy-port", 8090, "proxy server port (gRPC frontend)")
	fs.StringVar(&o.caCert, "ca-cert", "", "CA bundle used to verify the proxy server certificate")
	fs.StringVar(&o.clientCert, "client-cert", "", "client certificate (mTLS)")
	fs.StringVar(&o.clientKey, "client-key", "", "client private key (mTLS)")
	fs.StringVar(&o.tlsServerName, "tls-server-name", "", "server name to verify (default: --proxy-host)")
	fs.StringVar(&o.uds, "uds", "", "connect to the proxy server over this Unix socket with insecure credentials (ignores --proxy-host/--proxy-port and TLS flags)")
	fs.StringVar(&o.mode, "mode", "http", "http | tcp | firstbyte")
	fs.StringVar(&o.url, "url", "", "http mode: URL to GET through the tunnel, e.g. http://cluster1:8000/success")
	fs.StringVar(&o.method, "method", http.MethodGet, "http mode: request method")
	fs.StringVar(&o.address, "address", "", "tcp and firstbyte modes: host:port to dial through the tunnel")
	fs.IntVar(&o.count, "count", 1, "http and firstbyte modes: number of requests, each on its own single-use tunnel")
	fs.IntVar(&o.concurrency, "concurrency", 1, "http mode: number of requests in flight at once")
	fs.DurationVar(&o.timeout, "timeout", 60*time.Second, "overall deadline per request (http) or per connection (tcp); 0 = none")
	fs.BoolVar(&o.allowStatus, "allow-http-errors", false, "http mode: treat any HTTP status as success (default: status >= 400 is a failure)")
	fs.BoolVar(&o.quiet, "quiet", false, "http mode: do not print the response body")
	fs.StringVar(&o.stdinEOF, "stdin-eof", "wait", "tcp mode, what to do when stdin reaches EOF: wait = keep reading until the remote closes (konnectivity has no half-close); close = close the tunnelled connection right away")
	fs.Int64Var(&o.expectBytes, "expect-bytes", -1, "tcp mode: close the connection and exit 0 once this many bytes were received (-1 = off)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage of %s:\n", prog)
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	if fs.NArg() > 0 {
		usageErr("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}

	dialOpt, target, err := o.grpcDialOptions()
	if err != nil {
		fail(err)
	}

	switch o.mode {
	case "http":
		if o.url == "" {
			usageErr("--url is required in http mode")
		}
		if o.count < 1 || o.concurrency < 1 {
			usageErr("--count and --concurrency must be >= 1")
		}
		if o.count == 1 {
			if err := o.doHTTP(target, dialOpt, os.Stdout); err != nil {
				fail(err)
			}
			return
		}
		os.Exit(o.runMany(target, dialOpt))
	case "tcp":
		if o.address == "" {
			usageErr("--address is required in tcp mode")
		}
		if o.stdinEOF != "wait" && o.stdinEOF != "close" {
			usageErr("--stdin-eof must be wait or close")
		}
		if err := o.doTCP(target, dialOpt); err != nil {
			fail(err)
		}
	case "firstbyte":
		if o.address == "" {
			usageErr("--address is required in firstbyte mode")
		}
		if o.count < 1 {
			usageErr("--count must be >= 1")
		}
		if err := o.firstBytes(target, dialOpt); err != nil {
			fail(err)
		}
	default:
		usageErr("unknown --mode %q (want http, tcp or firstbyte)", o.mode)
	}
}

func usageErr(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s: "+format+"\n", append([]any{prog}, args...)...)
	os.Exit(2)
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "%s: %v\n", prog, err)
	os.Exit(1)
}

// grpcDialOptions returns the transport option and dial target for the proxy server.
func (o *options) grpcDialOptions() ([]grpc.DialOption, string, error) {
	if o.uds != "" {
		path := o.uds
		dialer := func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}
		// The authority is irrelevant to the server; any valid target works.
		return []grpc.DialOption{
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(dialer),
		}, "passthrough:///konnectivity-uds", nil
	}
	if o.caCert == "" || o.clientCert == "" || o.clientKey == "" {
		return nil, "", errors.New("--ca-cert, --client-cert and --client-key are required (or use --uds)")
	}
	cert, err := tls.LoadX509KeyPair(o.clientCert, o.clientKey)
	if err != nil {
		return nil, "", fmt.Errorf("loading client key pair: %w", err)
	}
	caPEM, err := os.ReadFile(o.caCert)
	if err != nil {
		return nil, "", fmt.Errorf("reading CA cert: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, "", fmt.Errorf("no certificates found in %s", o.caCert)
	}
	serverName := o.tlsServerName
	if serverName == "" {
		serverName = o.proxyHost
	}
	tlsCfg := &tls.Config{
		ServerName:   serverName,
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		MinVersion:   tls.VersionTLS12,
	}
	target := net.JoinHostPort(o.proxyHost, strconv.Itoa(o.proxyPort))
	return []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg))}, target, nil
}

func (o *options) context() (context.Context, context.CancelFunc) {
	if o.timeout > 0 {
		return context.WithTimeout(context.Background(), o.timeout)
	}
	return context.WithCancel(context.Background())
}

// doHTTP makes one single-use tunnel and performs one HTTP request through it.
func (o *options) doHTTP(target string, dialOpts []grpc.DialOption, out io.Writer) error {
	ctx, cancel := o.context()
	defer cancel()

	tunnel, err := konnectivity.CreateSingleUseGrpcTunnel(ctx, target, dialOpts...)
	if err != nil {
		return fmt.Errorf("creating tunnel: %w", err)
	}
	// Let the tunnel finish (CLOSE_REQ/CLOSE_RSP) before ctx is cancelled, or the
	// library logs a spurious "stream read failure ... context canceled" on stderr.
	var dialed atomic.Bool
	defer func() {
		if dialed.Load() {
			waitTunnel(ctx, tunnel)
		}
	}()
	transport := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dialed.Store(true)
			return tunnel.DialContext(ctx, network, addr)
		},
		DisableKeepAlives: true,
		// A single-use tunnel can be dialed exactly once; never retry or pool.
		MaxConnsPerHost: 1,
	}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport}

	req, err := http.NewRequestWithContext(ctx, o.method, o.url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if o.quiet {
		out = io.Discard
	}
	if _, err := io.Copy(out, resp.Body); err != nil {
		return fmt.Errorf("reading response body: %w", err)
	}
	if resp.StatusCode >= 400 && !o.allowStatus {
		return fmt.Errorf("unexpected HTTP status %s", resp.Status)
	}
	return nil
}

// waitTunnel waits (bounded) until the single-use tunnel has shut down. It is
// done once the connection got CLOSE_RSP, the dial failed, or the stream broke.
func waitTunnel(ctx context.Context, tunnel konnectivity.Tunnel) {
	t := time.NewTimer(konnectivity.CloseTimeout + time.Second)
	defer t.Stop()
	select {
	case <-tunnel.Done():
	case <-ctx.Done():
	case <-t.C:
	}
}

// runMany performs o.count requests, o.concurrency at a time, each on its own tunnel.
func (o *options) runMany(target string, dialOpts []grpc.DialOption) int {
	var ok, failed atomic.Int64
	var mu sync.Mutex
	errCounts := map[string]int{}
	jobs := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < o.concurrency; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				if err := o.doHTTP(target, dialOpts, io.Discard); err != nil {
					failed.Add(1)
					mu.Lock()
					errCounts[err.Error()]++
					mu.Unlock()
				} else {
					ok.Add(1)
				}
			}
		}()
	}
	for i := 0; i < o.count; i++ {
		jobs <- struct{}{}
	}
	close(jobs)
	wg.Wait()
	elapsed := time.Since(start)

	msgs := make([]string, 0, len(errCounts))
	for m := range errCounts {
		msgs = append(msgs, m)
	}
	sort.Slice(msgs, func(i, j int) bool { return errCounts[msgs[i]] > errCounts[msgs[j]] })
	for _, m := range msgs {
		fmt.Fprintf(os.Stderr, "%s: %d x %s\n", prog, errCounts[m], m)
	}
	fmt.Printf("%s: total=%d ok=%d failed=%d concurrency=%d elapsed=%.3fs\n",
		prog, o.count, ok.Load(), failed.Load(), o.concurrency, elapsed.Seconds())
	if failed.Load() > 0 {
		return 1
	}
	return 0
}

// firstBytes times o.count new connections to o.address (an echo server), each on its own
// single-use tunnel as the OCM README's clients open them: from the tunnel's creation to the
// first byte back. It prints "first-byte-ms" and the times in ms, space-separated.
func (o *options) firstBytes(target string, dialOpts []grpc.DialOption) error {
	times := make([]string, 0, o.count)
	for i := 0; i < o.count; i++ {
		ms, err := o.firstByte(target, dialOpts)
		if err != nil {
			return fmt.Errorf("connection %d of %d: %w", i+1, o.count, err)
		}
		times = append(times, strconv.FormatFloat(ms, 'f', 3, 64))
	}
	fmt.Printf("first-byte-ms %s\n", strings.Join(times, " "))
	return nil
}

func (o *options) firstByte(target string, dialOpts []grpc.DialOption) (float64, error) {
	ctx, cancel := o.context()
	defer cancel()
	start := time.Now()
	tunnel, err := konnectivity.CreateSingleUseGrpcTunnel(ctx, target, dialOpts...)
	if err != nil {
		return 0, fmt.Errorf("creating tunnel: %w", err)
	}
	conn, err := tunnel.DialContext(ctx, "tcp", o.address)
	if err != nil {
		return 0, fmt.Errorf("dial %s: %w", o.address, err)
	}
	defer waitTunnel(ctx, tunnel)
	defer conn.Close()
	if _, err := conn.Write([]byte("x")); err != nil {
		return 0, fmt.Errorf("write: %w", err)
	}
	if _, err := io.ReadFull(conn, make([]byte, 1)); err != nil {
		return 0, fmt.Errorf("read: %w", err)
	}
	return float64(time.Since(start).Microseconds()) / 1000, nil
}

// readerOnly hides io.WriterTo / io.ReaderFrom so io.CopyBuffer really uses our buffer
// (DATA packets stay at most 32 KiB, far below gRPC's 4 MiB message limit).
type readerOnly struct{ r io.Reader }

func (r readerOnly) Read(p []byte) (int, error) { return r.r.Read(p) }

type writerOnly struct{ w io.Writer }

func (w writerOnly) Write(p []byte) (int, error) { return w.w.Write(p) }

// doTCP dials o.address through one tunnel and pumps stdin/stdout.
//
// Konnectivity has no half-close: the only "close" packet (CLOSE_REQ) closes the
// whole connection, and the Go agent then closes the endpoint socket at once.
// So on stdin EOF the default (--stdin-eof=wait) is to stop sending and keep
// reading until the remote closes; --stdin-eof=close closes immediately.
// Remote EOF ends the program (exit 0) even if stdin is still open.
func (o *options) doTCP(target string, dialOpts []grpc.DialOption) error {
	ctx, cancel := o.context()
	defer cancel()

	tunnel, err := konnectivity.CreateSingleUseGrpcTunnel(ctx, target, dialOpts...)
	if err != nil {
		return fmt.Errorf("creating tunnel: %w", err)
	}
	conn, err := tunnel.DialContext(ctx, "tcp", o.address)
	if err != nil {
		return fmt.Errorf("dial %s: %w", o.address, err)
	}
	defer waitTunnel(ctx, tunnel)

	type result struct {
		dir string
		err error
	}
	done := make(chan result, 2)

	// stdin -> conn
	go func() {
		buf := make([]byte, 32*1024)
		_, err := io.CopyBuffer(writerOnly{conn}, readerOnly{os.Stdin}, buf)
		done <- result{"stdin", err}
	}()

	// conn -> stdout
	go func() {
		buf := make([]byte, 32*1024)
		var src io.Reader = readerOnly{conn}
		if o.expectBytes >= 0 {
			src = io.LimitReader(conn, o.expectBytes)
		}
		n, err := io.CopyBuffer(writerOnly{os.Stdout}, src, buf)
		if err == nil && o.expectBytes >= 0 && n < o.expectBytes {
			err = fmt.Errorf("connection closed after %d of %d expected bytes", n, o.expectBytes)
		}
		done <- result{"remote", err}
	}()

	// When the remote closes, the agent sends CLOSE_RSP and Read returns EOF after
	// the buffered data. A dying tunnel also ends in EOF (the library closes every
	// read channel), which the library does not let us tell apart: byte-exact tests
	// should compare lengths or use --expect-bytes.
	finish := func(err error) error {
		// Close sends CLOSE_REQ (or DIAL_CLS) if still open and waits up to 10 s for
		// CLOSE_RSP; its result is racy in the library and only informational.
		_ = conn.Close()
		return err
	}

	for {
		select {
		case <-ctx.Done():
			return finish(fmt.Errorf("tcp transfer: %w", ctx.Err()))
		case r := <-done:
			switch r.dir {
			case "remote":
				if r.err != nil {
					return finish(fmt.Errorf("reading from tunnel: %w", r.err))
				}
				return finish(nil)
			case "stdin":
				if r.err != nil {
					return finish(fmt.Errorf("writing to tunnel: %w", r.err))
				}
				if o.stdinEOF == "close" {
					return finish(nil)
				}
				// wait for the remote to close (or --expect-bytes reached)
			}
		}
	}
}

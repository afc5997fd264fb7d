// exec, attach and portForward: k8s.io/cri-streaming negotiates the protocol (SPDY/3.1 or
// WebSocket) and creates the streams; the methods below are the "container runtime" behind them.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

// The kubelet's defaults (streamingConnectionIdleTimeout 4h; stream creation 30s).
const (
	idleTimeout           = 4 * time.Hour
	streamCreationTimeout = 30 * time.Second
)

// remoteCommandTarget reads the stream options of an exec or attach request and checks that its
// container runs; ok is false once the request has been answered with why not.
func (k *kubelet) remoteCommandTarget(w http.ResponseWriter, r *http.Request) (key, container string, opts *remotecommand.Options, ok bool) {
	ns, name, container := r.PathValue("ns"), r.PathValue("pod"), r.PathValue("container")
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return "", "", nil, false
	}
	if _, err := k.running(ns, name, container); err != nil {
		podError(w, err, ns, name)
		return "", "", nil, false
	}
	return podKey(ns, name), container, opts, true
}

func (k *kubelet) serveExec(w http.ResponseWriter, r *http.Request) {
	key, container, opts, ok := k.remoteCommandTarget(w, r)
	if !ok {
		return
	}
	cmd := r.URL.Query()["command"]
	remotecommand.ServeExec(w, r, k, key, r.PathValue("uid"), container, cmd, opts,
		idleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

func (k *kubelet) serveAttach(w http.ResponseWriter, r *http.Request) {
	key, container, opts, ok := k.remoteCommandTarget(w, r)
	if !ok {
		return
	}
	remotecommand.ServeAttach(w, r, k, key, r.PathValue("uid"), container, opts,
		idleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

func (k *kubelet) servePortForward(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("ns"), r.PathValue("pod")
	opts, err := portforward.NewV4Options(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if _, err := k.pod(ns, name); err != nil {
		podError(w, err, ns, name)
		return
	}
	portforward.ServePortForward(w, r, k, podKey(ns, name), r.PathValue("uid"), opts,
		idleTimeout, streamCreationTimeout, portforward.SupportedProtocols)
}

// running returns the pod and its container, which must be running.
func (k *kubelet) running(ns, name, container string) (*containerInfo, error) {
	p, err := k.pod(ns, name)
	if err != nil {
		return nil, err
	}
	c := p.container(container)
	if c == nil {
		return nil, fmt.Errorf("container %q not found in pod %q: %w", container, name, errNotFound)
	}
	if c.Pid <= 0 {
		return nil, fmt.Errorf("container %q in pod %q is not running", container, name)
	}
	return c, nil
}

// ExecInContainer runs cmd in the namespaces of the container's process (network and mount: the
// pod's view of the machine), with its environment, in the pod's directory.
func (k *kubelet) ExecInContainer(ctx context.Context, key, _ string, container string, cmd []string,
	in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize, _ time.Duration) error {
	p, err := k.podByKey(key)
	if err != nil {
		return err
	}
	c := p.container(container)
	if c == nil || c.Pid <= 0 {
		return fmt.Errorf("container %q is not running", container)
	}
	if len(cmd) == 0 {
		return errors.New("no command")
	}
	args := append([]string{"-t", strconv.Itoa(c.Pid), "-n", "-m", "--wd=" + p.Dir, "--"}, cmd...)
	proc := exec.CommandContext(ctx, "nsenter", args...)
	proc.Env = c.Env
	proc.WaitDelay = 2 * time.Second
	if tty {
		err = runWithTTY(proc, in, out, resize)
	} else {
		err = runPlain(proc, in, out, errOut)
	}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		code := exitErr.ExitCode()
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
		return utilexec.CodeExitError{Err: err, Code: code}
	}
	return err
}

func runPlain(proc *exec.Cmd, in io.Reader, out, errOut io.Writer) error {
	if out != nil {
		proc.Stdout = out
	}
	if errOut != nil {
		proc.Stderr = errOut
	}
	if in != nil {
		w, err := proc.StdinPipe()
		if err != nil {
			return err
		}
		// Not waited for: the client's stdin may stay open after the command exits (Wait closes w).
		go func() {
			_, _ = io.Copy(w, in)
			_ = w.Close()
		}()
	}
	return proc.Run()
}

func runWithTTY(proc *exec.Cmd, in io.Reader, out io.Writer, resize <-chan remotecommand.TerminalSize) error {
	master, slave, err := openPty()
	if err != nil {
		return err
	}
	defer func() { _ = master.Close() }()
	// kubectl sends its terminal's size right after the streams are set up: apply it before the
	// command starts, so that the command sees it from its first instruction (bounded wait).
	select {
	case sz, ok := <-resize:
		if ok {
			setWinsize(master, sz)
		}
	case <-time.After(time.Second):
	}
	proc.Stdin, proc.Stdout, proc.Stderr = slave, slave, slave
	proc.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := proc.Start(); err != nil {
		_ = slave.Close()
		return err
	}
	_ = slave.Close()
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case sz, ok := <-resize:
				if !ok {
					return
				}
				setWinsize(master, sz)
			case <-done:
				return
			}
		}
	}()
	if in != nil {
		go func() { _, _ = io.Copy(master, in) }()
	}
	copied := make(chan struct{})
	go func() {
		// Ends with EIO once every holder of the terminal's other side has exited.
		if out != nil {
			_, _ = io.Copy(out, master)
		} else {
			_, _ = io.Copy(io.Discard, master)
		}
		close(copied)
	}()
	err = proc.Wait()
	select {
	case <-copied:
	case <-time.After(2 * time.Second):
	}
	return err
}

// AttachContainer streams the container's output from now on (from its log file) and feeds its
// stdin FIFO, until the client goes away or the container restarts or stops.
func (k *kubelet) AttachContainer(ctx context.Context, key, _ string, container string, in io.Reader,
	out, errOut io.WriteCloser, tty bool, _ <-chan remotecommand.TerminalSize) error {
	p, err := k.podByKey(key)
	if err != nil {
		return err
	}
	c := p.container(container)
	if c == nil {
		return fmt.Errorf("container %q not found", container)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if in != nil {
		if c.Stdin == "" {
			go func() { _, _ = io.Copy(io.Discard, in) }()
		} else {
			f, err := os.OpenFile(c.Stdin, os.O_WRONLY, 0)
			if err != nil {
				return fmt.Errorf("stdin of container %q: %w", container, err)
			}
			go func() {
				defer func() { _ = f.Close() }()
				_, _ = io.Copy(f, in)
				// The client closed its stdin (or went away): so does the attach, as a kubelet's.
				cancel()
			}()
		}
	}
	if tty || errOut == nil {
		errOut = nopCloser{out}
	}
	return k.stream(ctx, p, c.Name, c.Restarts, true, true, logOptions{tail: -1}, out, errOut)
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// PortForward connects to 127.0.0.1:port inside the pod's network namespace and copies both ways.
func (k *kubelet) PortForward(ctx context.Context, key, _ string, port int32, stream io.ReadWriteCloser) error {
	defer func() { _ = stream.Close() }()
	p, err := k.podByKey(key)
	if err != nil {
		return err
	}
	conn, err := dialInNetns(ctx, p.Netns, port)
	if err != nil {
		return fmt.Errorf("failed to connect to localhost:%d inside the network namespace of pod %s: %w", port, key, err)
	}
	defer func() { _ = conn.Close() }()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(stream, conn)
		_ = stream.Close()
	}()
	_, _ = io.Copy(conn, stream)
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	wg.Wait()
	return nil
}

// dialInNetns opens a TCP connection from inside network namespace netns ("" = this one). The
// socket is created by a thread that has entered the namespace and left it again; a thread that
// cannot return to its own namespace is never reused (it stays locked and exits with its goroutine).
func dialInNetns(ctx context.Context, netns string, port int32) (net.Conn, error) {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port)))
	d := net.Dialer{Timeout: 10 * time.Second}
	if netns == "" {
		return d.DialContext(ctx, "tcp", addr)
	}
	type result struct {
		conn net.Conn
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: err}
			return
		}
		defer func() { _ = self.Close() }()
		target, err := os.Open(fmt.Sprintf("/run/netns/%s", netns))
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: err}
			return
		}
		defer func() { _ = target.Close() }()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("setns %s: %w", netns, err)}
			return
		}
		conn, err := d.DialContext(ctx, "tcp", addr)
		if serr := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); serr != nil {
			// Leave the thread locked: it dies with this goroutine.
			if conn != nil {
				_ = conn.Close()
			}
			ch <- result{err: fmt.Errorf("returning from %s: %w", netns, serr)}
			return
		}
		runtime.UnlockOSThread()
		ch <- result{conn: conn, err: err}
	}()
	r := <-ch
	return r.conn, r.err
}

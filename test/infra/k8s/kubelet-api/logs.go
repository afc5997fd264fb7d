// containerLogs, and the output side of attach: CRI-format log files, as a container runtime
// writes them ("<RFC3339Nano time> <stdout|stderr> <F|P> <content>", P = partial line).
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// How often a followed log file is checked for new lines.
const followPoll = 50 * time.Millisecond

type logOptions struct {
	// tail: the last n lines only (-1: all)
	tail       int
	timestamps bool
	since      time.Time
	limitBytes int64
}

func logFile(p *podInfo, container string, restarts int) string {
	return filepath.Join(p.Dir, "logs", container, strconv.Itoa(restarts)+".log")
}

func (k *kubelet) serveLogs(w http.ResponseWriter, r *http.Request) {
	ns, name, cname := r.PathValue("ns"), r.PathValue("pod"), r.PathValue("container")
	p, err := k.pod(ns, name)
	if err != nil {
		podError(w, err, ns, name)
		return
	}
	c := p.container(cname)
	if c == nil {
		http.Error(w, fmt.Sprintf("container %q not found in pod %q", cname, name), http.StatusNotFound)
		return
	}
	q := r.URL.Query()
	// The apiserver encodes v1.PodLogOptions; "tail" is the kubelet's legacy spelling.
	if t := q.Get("tail"); t != "" && q.Get("tailLines") == "" && t != "all" {
		q.Set("tailLines", t)
	}
	o := logOptions{tail: -1, timestamps: q.Get("timestamps") == "true"}
	bad := func(msg string) { http.Error(w, msg, http.StatusBadRequest) }
	if s := q.Get("tailLines"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			bad("tailLines must be a non-negative integer")
			return
		}
		o.tail = n
	}
	if s := q.Get("sinceSeconds"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			bad("sinceSeconds must be a positive integer")
			return
		}
		o.since = time.Now().Add(-time.Duration(n) * time.Second)
	}
	if s := q.Get("sinceTime"); s != "" {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			bad("sinceTime must be RFC 3339")
			return
		}
		o.since = t
	}
	if s := q.Get("limitBytes"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1 {
			bad("limitBytes must be a positive integer")
			return
		}
		o.limitBytes = n
	}
	follow := q.Get("follow") == "true"
	n := c.Restarts
	if q.Get("previous") == "true" {
		if n == 0 {
			bad(fmt.Sprintf("previous terminated container %q in pod %q not found", cname, name))
			return
		}
		n--
		follow = false
	}
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	fw := &flushWriter{w: w, rc: http.NewResponseController(w), left: o.limitBytes}
	err = k.stream(r.Context(), p, c.Name, n, false, follow, o, fw, fw)
	if err != nil && !errors.Is(err, errLimit) && r.Context().Err() == nil {
		_, _ = fmt.Fprintf(w, "\n(kubelet-api: %v)\n", err)
	}
}

var errLimit = errors.New("limitBytes reached")

// flushWriter flushes every write to the client and stops after limitBytes (left > 0).
type flushWriter struct {
	w    io.Writer
	rc   *http.ResponseController
	left int64
}

func (f *flushWriter) Write(b []byte) (int, error) {
	limited := false
	if f.left > 0 {
		if int64(len(b)) >= f.left {
			b = b[:f.left]
			limited = true
		}
		f.left -= int64(len(b))
	}
	n, err := f.w.Write(b)
	if err == nil {
		err = f.rc.Flush()
	}
	if err == nil && limited {
		err = errLimit
	}
	return n, err
}

func (f *flushWriter) Close() error { return nil }

// stream writes the lines of log file <restarts>.log of container cname to out (stdout) and
// errOut (stderr). fromEnd: only what is written from now on (attach); otherwise the file's
// current content, filtered by o. follow: then new lines as they arrive, until the container
// stops or restarts (its next log file), the pod goes away, or the client does (a failed write).
func (k *kubelet) stream(ctx context.Context, p *podInfo, cname string, restarts int, fromEnd, follow bool,
	o logOptions, out, errOut io.Writer) error {
	path := logFile(p, cname, restarts)
	var f *os.File
	tick := time.NewTicker(followPoll)
	defer tick.Stop()
	// done: the container is no longer the one that writes this file.
	done := func() bool {
		cur, err := k.pod(p.Namespace, p.Name)
		if err != nil || cur.UID != p.UID {
			return true
		}
		c := cur.container(cname)
		return c == nil || c.Restarts != restarts || c.Pid <= 0
	}
	for f == nil {
		var err error
		f, err = os.Open(path)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if !follow || done() {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
	defer func() { _ = f.Close() }()
	var pending []byte
	if fromEnd {
		if _, err := f.Seek(0, io.SeekEnd); err != nil {
			return err
		}
	} else {
		all, err := io.ReadAll(f)
		if err != nil {
			return err
		}
		cut := bytes.LastIndexByte(all, '\n') + 1
		pending = append(pending, all[cut:]...)
		lines := parseLines(all[:cut])
		var kept []logLine
		for _, l := range lines {
			if o.since.IsZero() || !l.ts.Before(o.since) {
				kept = append(kept, l)
			}
		}
		if o.tail >= 0 && len(kept) > o.tail {
			kept = kept[len(kept)-o.tail:]
		}
		if err := writeLines(kept, o.timestamps, out, errOut); err != nil {
			return err
		}
	}
	if !follow {
		return nil
	}
	buf := make([]byte, 64*1024)
	finishing := false
	for {
		n, err := f.Read(buf)
		if n > 0 {
			pending = append(pending, buf[:n]...)
			cut := bytes.LastIndexByte(pending, '\n') + 1
			if cut > 0 {
				if werr := writeLines(parseLines(pending[:cut]), o.timestamps, out, errOut); werr != nil {
					return werr
				}
				pending = append(pending[:0], pending[cut:]...)
			}
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if finishing {
			return nil
		}
		if done() {
			// One more read: what was written before the container stopped.
			finishing = true
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// logLine is one line of output: CRI partial entries ("P") joined with the full one ("F") that ends it.
type logLine struct {
	ts      time.Time
	rawTS   string
	stderr  bool
	content []byte
}

// parseLines parses complete CRI log lines; anything malformed is passed through as stdout.
func parseLines(b []byte) []logLine {
	var out []logLine
	var partial *logLine
	for _, raw := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
		parts := strings.SplitN(string(raw), " ", 4)
		if len(parts) < 3 || (parts[2] != "F" && parts[2] != "P") {
			out = append(out, logLine{content: append(raw, '\n')})
			continue
		}
		content := ""
		if len(parts) == 4 {
			content = parts[3]
		}
		if partial == nil {
			ts, _ := time.Parse(time.RFC3339Nano, parts[0])
			partial = &logLine{ts: ts, rawTS: parts[0], stderr: parts[1] == "stderr"}
		}
		partial.content = append(partial.content, content...)
		if parts[2] == "F" {
			partial.content = append(partial.content, '\n')
			out = append(out, *partial)
			partial = nil
		}
	}
	if partial != nil {
		out = append(out, *partial)
	}
	return out
}

func writeLines(lines []logLine, timestamps bool, out, errOut io.Writer) error {
	for _, l := range lines {
		w := out
		if l.stderr {
			w = errOut
		}
		if w == nil {
			continue
		}
		b := l.content
		if timestamps && l.rawTS != "" {
			b = append([]byte(l.rawTS+" "), b...)
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// kubelet-api is a test peer of the multi-cluster test environment (test/env): the part of a
// kubelet's API that kube-apiserver calls for pods/log, pods/exec, pods/attach and
// pods/portforward, for the pods that the process kubelet (test/env/kubelet.ts) runs as local
// processes. The streaming protocols (SPDY/3.1 and the WebSocket channel protocols, as
// kube-apiserver speaks them to a kubelet) are served by k8s.io/cri-streaming, the package the
// kubelet itself uses; this program only supplies what a container runtime would:
//
//   - /containerLogs/{ns}/{pod}/{container}: the CRI-format log files the process kubelet writes
//     (<pods-dir>/<ns>_<pod>/logs/<container>/<restart count>.log), with follow, tailLines,
//     timestamps, previous, sinceSeconds, sinceTime and limitBytes;
//   - /exec/...: the command runs through nsenter in the network and mount namespaces of the
//     container's process (as the pod's process sees them), with the container's environment, a
//     pseudo-terminal when asked (resized on request) and the exit status reported back;
//   - /attach/...: the container's output from now on, and its stdin (a FIFO) when the container
//     has `stdin: true`;
//   - /portForward/...: connections to 127.0.0.1:<port> opened inside the pod's network namespace.
//
// What a pod is comes from <pods-dir>/<ns>_<pod>/pod.json, which the process kubelet writes.
// TLS: the serving certificate is signed by the cluster CA (kube-apiserver's
// --kubelet-certificate-authority); clients must present a certificate signed by --client-ca-file
// whose common name is in --allowed-users (kube-apiserver's --kubelet-client-certificate): a real
// kubelet authenticates the same certificate and authorizes it with a SubjectAccessReview.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// podInfo is pod.json, written by test/env/kubelet.ts.
type podInfo struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	// Netns is the pod's network namespace (/run/netns/<netns>); empty for hostNetwork pods.
	Netns      string          `json:"netns"`
	Dir        string          `json:"dir"`
	Containers []containerInfo `json:"containers"`
}

type containerInfo struct {
	Name string `json:"name"`
	// Pid of the container's process (0 while it is not running); its namespaces are the pod's.
	Pid      int      `json:"pid"`
	Restarts int      `json:"restarts"`
	Env      []string `json:"env"`
	// Stdin is the FIFO that is the container's stdin (containers with `stdin: true`), else "".
	Stdin string `json:"stdin"`
}

type kubelet struct {
	podsDir string
}

var nameRe = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)

var errNotFound = errors.New("not found")

// pod reads a pod's pod.json; errNotFound when this node runs no such pod.
func (k *kubelet) pod(ns, name string) (*podInfo, error) {
	if !nameRe.MatchString(ns) || !nameRe.MatchString(name) {
		return nil, errNotFound
	}
	b, err := os.ReadFile(filepath.Join(k.podsDir, ns+"_"+name, "pod.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, err
	}
	p := &podInfo{}
	if err := json.Unmarshal(b, p); err != nil {
		return nil, fmt.Errorf("pod.json of %s/%s: %w", ns, name, err)
	}
	return p, nil
}

func (p *podInfo) container(name string) *containerInfo {
	for i := range p.Containers {
		if p.Containers[i].Name == name {
			return &p.Containers[i]
		}
	}
	return nil
}

// podKey joins namespace and name for the streaming interfaces, which pass one pod name string.
func podKey(ns, name string) string { return ns + "/" + name }

func (k *kubelet) podByKey(key string) (*podInfo, error) {
	ns, name, _ := strings.Cut(key, "/")
	return k.pod(ns, name)
}

func main() {
	addr := flag.String("address", "", "host:port to listen on (the node's address, port 10250)")
	certFile := flag.String("tls-cert-file", "", "serving certificate")
	keyFile := flag.String("tls-private-key-file", "", "serving key")
	clientCA := flag.String("client-ca-file", "", "CA of the client certificates (kube-apiserver's kubelet client)")
	allowed := flag.String("allowed-users", "kube-apiserver-kubelet-client", "comma-separated client certificate common names")
	podsDir := flag.String("pods-dir", "", "the process kubelet's work dir (<ns>_<pod>/pod.json)")
	flag.Parse()
	if *addr == "" || *certFile == "" || *keyFile == "" || *clientCA == "" || *podsDir == "" {
		log.Fatal("kubelet-api: --address, --tls-cert-file, --tls-private-key-file, --client-ca-file and --pods-dir are required")
	}
	caPEM, err := os.ReadFile(*clientCA)
	if err != nil {
		log.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		log.Fatalf("%s: no certificate", *clientCA)
	}
	users := map[string]bool{}
	for _, u := range strings.Split(*allowed, ",") {
		users[strings.TrimSpace(u)] = true
	}
	k := &kubelet{podsDir: *podsDir}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("GET /containerLogs/{ns}/{pod}/{container}", k.serveLogs)
	for _, p := range []string{"/exec/{ns}/{pod}/{container}", "/exec/{ns}/{pod}/{uid}/{container}"} {
		mux.HandleFunc(p, k.serveExec)
	}
	for _, p := range []string{"/attach/{ns}/{pod}/{container}", "/attach/{ns}/{pod}/{uid}/{container}"} {
		mux.HandleFunc(p, k.serveAttach)
	}
	for _, p := range []string{"/portForward/{ns}/{pod}", "/portForward/{ns}/{pod}/{uid}"} {
		mux.HandleFunc(p, k.servePortForward)
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 || !users[r.TLS.PeerCertificates[0].Subject.CommonName] {
			http.Error(w, "Forbidden: this kubelet serves only the apiserver's kubelet client", http.StatusForbidden)
			return
		}
		log.Printf("%s %s", r.Method, r.URL.RequestURI())
		mux.ServeHTTP(w, r)
	})
	srv := &http.Server{
		Addr:              *addr,
		Handler:           handler,
		ReadHeaderTimeout: 30 * time.Second,
		TLSConfig: &tls.Config{
			ClientAuth: tls.RequireAndVerifyClientCert,
			ClientCAs:  pool,
			MinVersion: tls.VersionTLS12,
			// HTTP/1.1 only: SPDY and WebSocket upgrades need it (as the kubelet's own server).
			NextProtos: []string{"http/1.1"},
		},
	}
	log.Printf("kubelet-api: serving on %s for the pods in %s", *addr, *podsDir)
	log.Fatal(srv.ListenAndServeTLS(*certFile, *keyFile))
}

// podError writes the kubelet's answer for a pod or container it does not run.
func podError(w http.ResponseWriter, err error, ns, pod string) {
	if errors.Is(err, errNotFound) {
		http.Error(w, fmt.Sprintf("pod %q does not exist", ns+"/"+pod), http.StatusNotFound)
		return
	}
	http.Error(w, err.Error(), http.StatusInternalServerError)
}

// clientgo-tunnel is a test peer: the seeds' Go snippet, literally. It opens a single-use
// konnectivity-client gRPC tunnel to the hub's proxy-server (mTLS with the proxy-client
// certificate), sets client-go's cfg.Dial = tunnel.DialContext, and lists the namespaces of one
// managed cluster with TLS verified against that cluster's CA (its ManagedCluster caBundle) for
// the name kubernetes.default.svc. It prints one JSON line: {"ok":true,"namespaces":[...]} or
// {"ok":false,"error":"..."}.
//
// Usage: clientgo-tunnel <proxy host:port> <proxy server name> <cert dir with ca.crt, tls.crt,
// tls.key> <cluster> <cluster CA file> <kubeconfig with the cluster user's credentials>
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	konnectivity "sigs.k8s.io/apiserver-network-proxy/konnectivity-client/pkg/client"
)

type result struct {
	OK         bool     `json:"ok"`
	Namespaces []string `json:"namespaces,omitempty"`
	Error      string   `json:"error,omitempty"`
}

func main() {
	out := json.NewEncoder(os.Stdout)
	if err := run(out); err != nil {
		_ = out.Encode(result{Error: err.Error()})
	}
}

func run(out *json.Encoder) error {
	if len(os.Args) != 7 {
		return fmt.Errorf("usage: clientgo-tunnel <proxy host:port> <proxy server name> <cert dir> <cluster> <cluster CA file> <kubeconfig>")
	}
	proxyAddr, serverName, certDir, cluster, clusterCA, kubeconfig := os.Args[1], os.Args[2], os.Args[3], os.Args[4], os.Args[5], os.Args[6]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	caPEM, err := os.ReadFile(filepath.Join(certDir, "ca.crt"))
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("%s: no certificate", filepath.Join(certDir, "ca.crt"))
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(certDir, "tls.crt"), filepath.Join(certDir, "tls.key"))
	if err != nil {
		return err
	}
	tunnel, err := konnectivity.CreateSingleUseGrpcTunnel(ctx, proxyAddr,
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
			RootCAs:      pool,
			Certificates: []tls.Certificate{cert},
			ServerName:   serverName,
		})))
	if err != nil {
		return fmt.Errorf("tunnel: %w", err)
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.Host = "https://" + cluster + ":443"
	cfg.TLSClientConfig.CAFile = clusterCA
	cfg.TLSClientConfig.CAData = nil
	cfg.TLSClientConfig.ServerName = "kubernetes.default.svc"
	cfg.TLSClientConfig.Insecure = false
	cfg.Dial = tunnel.DialContext

	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	list, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list namespaces: %w", err)
	}
	names := make([]string, 0, len(list.Items))
	for _, n := range list.Items {
		names = append(names, n.Name)
	}
	return out.Encode(result{OK: true, Namespaces: names})
}

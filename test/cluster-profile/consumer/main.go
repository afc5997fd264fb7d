// The ClusterProfile consumer of the end-to-end test (test/cluster-profile): what a fleet
// controller such as Kueue's MultiKueue does with the real sigs.k8s.io/cluster-inventory-api
// library, at the version OCM v1.2.1 requires. It reads one ClusterProfile from the hub, builds a
// rest.Config with credentials.BuildConfigFromCP from a provider file, and lists the cluster's
// namespaces through whatever the profile's access provider names (for cluster-proxy: the gateway,
// TLS verified against the profile's CA data, the token from the provider's exec plugin).
//
// Output: one JSON line {"server": ..., "namespaces": [...]} on stdout, exit 0; or the error on
// stderr, exit 1.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	cpclient "sigs.k8s.io/cluster-inventory-api/client/clientset/versioned"
	"sigs.k8s.io/cluster-inventory-api/pkg/credentials"
)

type result struct {
	Server     string   `json:"server"`
	Namespaces []string `json:"namespaces"`
}

func main() {
	providerFile := credentials.SetupProviderFileFlag()
	hubKubeconfig := flag.String("hub-kubeconfig", "", "kubeconfig of the hub, to read the ClusterProfile")
	namespace := flag.String("namespace", "", "namespace of the ClusterProfile")
	name := flag.String("profile", "", "name of the ClusterProfile")
	flag.Parse()
	if err := run(*providerFile, *hubKubeconfig, *namespace, *name); err != nil {
		fmt.Fprintf(os.Stderr, "consumer: %v\n", err)
		os.Exit(1)
	}
}

func run(providerFile, hubKubeconfig, namespace, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	hub, err := clientcmd.BuildConfigFromFlags("", hubKubeconfig)
	if err != nil {
		return fmt.Errorf("hub kubeconfig: %w", err)
	}
	profile, err := cpclient.NewForConfigOrDie(hub).ApisV1alpha1().ClusterProfiles(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading ClusterProfile %s/%s: %w", namespace, name, err)
	}

	// The consumer side of the ClusterProfile API: the three lines of Go that our README shows
	// (the suite checks that they are these, as written).
	provider, err := credentials.NewFromFile(providerFile)
	if err != nil {
		return err
	}
	config, err := provider.BuildConfigFromCP(profile)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}

	list, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		// The reason of an API error (Forbidden, Unauthorized, ...) names the refusal.
		return fmt.Errorf("listing namespaces of %s through %s: %s: %w", name, config.Host, apierrors.ReasonForError(err), err)
	}
	out := result{Server: config.Host}
	for _, ns := range list.Items {
		out.Namespaces = append(out.Namespaces, ns.Name)
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

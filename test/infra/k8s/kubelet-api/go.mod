// A test peer for the multi-cluster test environment (test/env): the kubelet API (containerLogs,
// exec, attach, portForward) for the pods the process kubelet runs. Built by
// scripts/kubelet-api-binary.mjs; see docs/testing/environment.md.
module cluster-proxy.local/k8s/kubelet-api

go 1.26.0

require (
	golang.org/x/sys v0.40.0
	k8s.io/cri-streaming v0.36.3
	k8s.io/utils v0.0.0-20260210185600-b8788abfbbc2
)

require (
	github.com/go-logr/logr v1.4.3 // indirect
	github.com/moby/spdystream v0.5.1 // indirect
	golang.org/x/net v0.49.0 // indirect
	k8s.io/klog/v2 v2.140.0 // indirect
	k8s.io/streaming v0.36.3 // indirect
)

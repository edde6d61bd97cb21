"""Running Herald on Kubernetes: the sidecar `herald k8s inject` adds to workloads.

`sidecar` builds the container, its volumes and its ConfigMap; `sizing` turns an expected
throughput into resource requests; `inject` walks manifests and adds the sidecar to every pod
template; `command` is the CLI.
"""

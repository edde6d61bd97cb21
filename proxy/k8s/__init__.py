"""Running Herald on Kubernetes: the sidecar `herald k8s inject` adds to workloads.

`sidecar` builds the container, its volumes and its ConfigMap; `sizing` turns an expected
throughput into resource requests; `inject` walks manifests and adds the sidecar to every pod
template (`inject_pod`, the one injection); `command` is the CLI. The admission webhook
(`herald k8s webhook`) runs the same `inject_pod` on each pod the API server creates:
`admission` decides and answers one AdmissionReview, `json_patch` turns the injected pod into
the patch, `webhook_server` serves HTTPS on trio, `webhook_command` is its CLI.
"""

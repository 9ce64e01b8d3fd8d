# Sourced by build.sh / up.sh / apiserver.sh: pinned versions and binary locations.
# shellcheck shell=bash
VIGIL_REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
K8S_VERSION="${VIGIL_K8S_VERSION:-v1.34.4}"
KINE_VERSION="${VIGIL_KINE_VERSION:-v0.17.5}"
VIGIL_CACHE_DIR="${VIGIL_CACHE_DIR:-$VIGIL_REPO_ROOT/.cache}"
KUBE_APISERVER_BIN="$VIGIL_CACHE_DIR/k8s-bin/${K8S_VERSION}/kube-apiserver"
KINE_BIN="$VIGIL_CACHE_DIR/k8s-bin/kine-${KINE_VERSION}/kine"
# A real etcd (the storage production clusters run; up.sh --storage etcd), built by build-etcd.sh from
# the go.etcd.io/etcd/server/v3 module, whose root is etcd's main package (3.5+).
ETCD_VERSION="${VIGIL_ETCD_VERSION:-v3.7.3}"
ETCD_BIN="$VIGIL_CACHE_DIR/k8s-bin/etcd-${ETCD_VERSION}/etcd"
# Operator tools for test/deploy: helm v4 (own module, no replace directives, so `go install` works)
# and kubectl from k8s.io/kubernetes at the API server's version.
HELM_VERSION="${VIGIL_HELM_VERSION:-v4.3.2}"
HELM_BIN="$VIGIL_CACHE_DIR/k8s-bin/helm-${HELM_VERSION}/helm"
KUBECTL_BIN="$VIGIL_CACHE_DIR/k8s-bin/${K8S_VERSION}/kubectl"
# Prometheus 3.x as the github.com/prometheus/prometheus module version (v0.316.0 = 3.16.0);
# built by build-prometheus.sh.
PROM_VERSION="${VIGIL_PROM_VERSION:-v0.316.0}"
PROMETHEUS_BIN="$VIGIL_CACHE_DIR/prom-bin/${PROM_VERSION}/prometheus"
PROMTOOL_BIN="$VIGIL_CACHE_DIR/prom-bin/${PROM_VERSION}/promtool"
# A real Node for test/cluster/up.sh --with-node (build-node.sh): kubelet, kube-scheduler and
# kube-controller-manager at the API server's version, crane (go-containerregistry) for the local
# registry, and the pause (sandbox) image compiled from the kubernetes module's build/pause/linux/pause.c.
CRANE_VERSION="${VIGIL_CRANE_VERSION:-v0.22.1}"
KUBELET_BIN="$VIGIL_CACHE_DIR/k8s-bin/${K8S_VERSION}/kubelet"
KUBE_SCHEDULER_BIN="$VIGIL_CACHE_DIR/k8s-bin/${K8S_VERSION}/kube-scheduler"
KUBE_CONTROLLER_MANAGER_BIN="$VIGIL_CACHE_DIR/k8s-bin/${K8S_VERSION}/kube-controller-manager"
CRANE_BIN="$VIGIL_CACHE_DIR/k8s-bin/crane-${CRANE_VERSION}/crane"
# The pause image as a docker-archive tarball (tag PAUSE_IMAGE), imported into the node's containerd.
PAUSE_IMAGE="vigil.local/pause:${K8S_VERSION}"
PAUSE_TAR="$VIGIL_CACHE_DIR/k8s-bin/${K8S_VERSION}/pause-image.tar"

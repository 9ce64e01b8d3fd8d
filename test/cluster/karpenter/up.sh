#!/usr/bin/env bash
# Adds Karpenter's node repair to a control plane started by test/cluster/up.sh (`up.sh --with-karpenter` calls this):
# applies Karpenter's CRDs, a KWOKNodeClass "default" (marked Ready: the kwok provider has no NodeClass status
# controller), then starts karpenter-vigil (NodeRepair=true, StaticCapacity=true) and the KWOK controller, which keeps
# the kwok provider's Nodes Ready. Both are stopped by down.sh. Usage: test/cluster/karpenter/up.sh [STATE_DIR]
# Env: VIGIL_REPAIR_TOLERATION_SCALE (default 1: the AWS tolerations, 10 min / 30 min), VIGIL_REPAIR_TOLERATIONS,
#      LEGACY_NODE_REPAIR=true (Karpenter's legacy node.health controller instead of repair as disruption).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VIGIL_LOG_PREFIX="karpenter-up"
# shellcheck source=../lib.sh
source "$HERE/../lib.sh"

DIR="$(resolve_dir "${1:-}")"
[[ -e "$DIR/$MARKER" && -f "$DIR/admin.kubeconfig" ]] || die "$DIR holds no cluster started by up.sh"

BINS="$(bash "$HERE/../build-karpenter.sh")" || die "test/cluster/build-karpenter.sh failed"
KARPENTER="$(sed -n 1p <<<"$BINS")"
KWOK="$(sed -n 2p <<<"$BINS")"
[[ -x "$KUBECTL_BIN" ]] || bash "$HERE/../build.sh" >/dev/null
K=("$KUBECTL_BIN" --kubeconfig "$DIR/admin.kubeconfig")

# Server-side apply: the NodePool CRD is too large for kubectl's last-applied annotation.
"${K[@]}" apply --server-side -f "$VIGIL_CACHE_DIR/karpenter/crds/" >&2
"${K[@]}" wait --for condition=established --timeout=60s crd --all >&2
"${K[@]}" apply --server-side -f - >&2 <<'EOF'
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata:
  name: default
spec: {}
EOF
NOW="$(date -u +%FT%TZ)"
"${K[@]}" patch kwoknodeclass default --subresource=status --type=merge \
  -p "{\"status\":{\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\",\"reason\":\"Ready\",\"message\":\"\",\"lastTransitionTime\":\"$NOW\",\"observedGeneration\":1}]}}" >&2

stop_pid "$DIR/karpenter-vigil.pid" karpenter-vigil
stop_pid "$DIR/kwok.pid" kwok
METRICS_PORT="$(free_port)"; PROBE_PORT="$(free_port)"; KWOK_PORT="$(free_port)"
(
  export KUBECONFIG="$DIR/admin.kubeconfig" DISABLE_LEADER_ELECTION=true FEATURE_GATES="NodeRepair=true,StaticCapacity=true"
  export METRICS_PORT HEALTH_PROBE_PORT="$PROBE_PORT"
  launch "$DIR" karpenter-vigil "$KARPENTER"
)
STAGE_ARGS=()
for f in "$VIGIL_CACHE_DIR"/karpenter/kwok-stages/*.yaml "$HERE/node-not-ready-taint.yaml"; do STAGE_ARGS+=("--config=$f"); done
launch "$DIR" kwok "$KWOK" --kubeconfig="$DIR/admin.kubeconfig" --manage-all-nodes=false \
  --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake --server-address="127.0.0.1:$KWOK_PORT" --node-ip=127.0.0.1 \
  "${STAGE_ARGS[@]}"

for _ in $(seq 1 600); do
  curl -fsS "http://127.0.0.1:$PROBE_PORT/readyz" >/dev/null 2>&1 && break
  pid_alive "$DIR/karpenter-vigil.pid" karpenter-vigil || { tail_log "$DIR/karpenter-vigil.log"; die "karpenter-vigil exited"; }
  sleep 0.2
done
curl -fsS "http://127.0.0.1:$PROBE_PORT/readyz" >/dev/null 2>&1 || { tail_log "$DIR/karpenter-vigil.log"; die "karpenter-vigil not ready after 120 s"; }
pid_alive "$DIR/kwok.pid" kwok || { tail_log "$DIR/kwok.log"; die "kwok exited"; }
printf 'KARPENTER_METRICS_PORT=%s\nKARPENTER_HEALTH_PROBE_PORT=%s\nKWOK_PORT=%s\n' "$METRICS_PORT" "$PROBE_PORT" "$KWOK_PORT" > "$DIR/karpenter.env"
log "karpenter-vigil ready (metrics :$METRICS_PORT, log $DIR/karpenter-vigil.log); kwok running (log $DIR/kwok.log)"
log "try: a NodePool with nodeClassRef {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default} and requirements (e.g. node.kubernetes.io/instance-type In [c-1x-amd64-linux])"

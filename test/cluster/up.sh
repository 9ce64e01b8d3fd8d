#!/usr/bin/env bash
# Starts a real local control plane: kine (etcd API over SQLite) or a real etcd, + kube-apiserver, on
# 127.0.0.1 with random free ports. Usage:
#   test/cluster/up.sh [STATE_DIR]          (or VIGIL_CLUSTER_DIR=/tmp/x test/cluster/up.sh)
#   test/cluster/up.sh --storage etcd|kine [STATE_DIR]  the API server's storage (default kine, or
#                                                     $VIGIL_CLUSTER_STORAGE): etcd is a single-member
#                                                     etcd (build-etcd.sh) with its data in STATE_DIR/etcd
#   test/cluster/up.sh --with-karpenter [STATE_DIR]   also Karpenter node repair + KWOK (test/cluster/karpenter/up.sh)
#   test/cluster/up.sh --with-node [STATE_DIR]        also a real Node: kubelet + containerd + runc, kube-scheduler,
#                                                     kube-controller-manager and a local registry (node-lib.sh);
#                                                     one per host at a time, host changes undone by down.sh
# STATE_DIR defaults to <repo>/.cluster. Several state dirs can run concurrently.
# Any previous cluster state in STATE_DIR is stopped and wiped (a fresh cluster every time).
# On success prints the admin kubeconfig path (only line on stdout) and writes in STATE_DIR:
#   admin.kubeconfig  agent.kubeconfig  admin.token  agent.token  pki/ca.crt  apiserver.port
#   cluster.env (shell, sourceable)  cluster.json (for Node tests)  *.pid  *.log
# Env: VIGIL_CLUSTER_TIMEOUT (readiness timeout s, default 180), VIGIL_APISERVER_EXTRA_ARGS,
#      VIGIL_SKIP_BUILD=1 (fail instead of building when binaries are missing).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VIGIL_LOG_PREFIX="up.sh"
# shellcheck source=lib.sh
source "$HERE/lib.sh"

for tool in openssl curl; do command -v "$tool" >/dev/null 2>&1 || die "$tool is required"; done

# --with-karpenter: also start Karpenter's node repair (test/cluster/karpenter/up.sh; stopped by down.sh).
WITH_KARPENTER=0; WITH_NODE=0; ARGS=(); STORAGE="${VIGIL_CLUSTER_STORAGE:-kine}"
while (($#)); do
  case "$1" in
    --with-karpenter) WITH_KARPENTER=1 ;;
    --with-node) WITH_NODE=1 ;;
    --storage) [[ $# -ge 2 ]] || die "--storage needs etcd or kine"; STORAGE="$2"; shift ;;
    --storage=*) STORAGE="${1#--storage=}" ;;
    *) ARGS+=("$1") ;;
  esac
  shift
done
[[ "$STORAGE" == etcd || "$STORAGE" == kine ]] || die "--storage must be etcd or kine, not '$STORAGE'"
DIR="$(resolve_dir "${ARGS[0]:-}")"
if [[ "$WITH_NODE" == 1 ]]; then
  # shellcheck source=node-lib.sh
  source "$HERE/node-lib.sh"
  for tool in containerd runc ctr iptables-save ip6tables-save ip node; do command -v "$tool" >/dev/null 2>&1 || die "--with-node needs $tool"; done
  [[ -x /usr/lib/cni/bridge ]] || die "--with-node needs the CNI plugins in /usr/lib/cni (apt-get install containernetworking-plugins)"
  if [[ ! -x "$KUBELET_BIN" || ! -x "$KUBE_SCHEDULER_BIN" || ! -x "$KUBE_CONTROLLER_MANAGER_BIN" || ! -x "$CRANE_BIN" || ! -s "$PAUSE_TAR" ]]; then
    [[ "${VIGIL_SKIP_BUILD:-0}" == 1 ]] && die "node binaries missing; run test/cluster/build-node.sh"
    log "node binaries missing; running build-node.sh (slow on a cold cache)"
    bash "$HERE/build-node.sh" >/dev/null
  fi
fi

if [[ ! -x "$KUBE_APISERVER_BIN" || ! -x "$KINE_BIN" ]]; then
  [[ "${VIGIL_SKIP_BUILD:-0}" == 1 ]] && die "binaries missing ($KUBE_APISERVER_BIN, $KINE_BIN); run test/cluster/build.sh"
  log "binaries missing; running build.sh (slow on a cold cache)"
  bash "$HERE/build.sh" >/dev/null
fi
if [[ "$STORAGE" == etcd && ! -x "$ETCD_BIN" ]]; then
  [[ "${VIGIL_SKIP_BUILD:-0}" == 1 ]] && die "etcd missing ($ETCD_BIN); run test/cluster/build-etcd.sh"
  log "etcd missing; running build-etcd.sh"
  bash "$HERE/build-etcd.sh" >/dev/null
fi

# Refuse to wipe a non-empty directory that we did not create.
if [[ ! -e "$DIR/$MARKER" && -n "$(ls -A "$DIR")" ]]; then
  die "$DIR is not empty and is not a Vigil cluster dir (no $MARKER); refusing to use it"
fi
# Stop leftovers of a previous run in the same dir, then wipe only our own files.
stop_pid "$DIR/karpenter-vigil.pid" karpenter-vigil; stop_pid "$DIR/kwok.pid" kwok
# A node left running in this dir: down.sh stops it and puts the host back.
if [[ -e "$DIR/$MARKER" && -f "$DIR/node-lock.pid" ]]; then bash "$HERE/down.sh" "$DIR"; fi
stop_apiserver "$DIR"; stop_kine "$DIR"; stop_etcd "$DIR"
rm -rf "$DIR/pki" "$DIR/kine" "$DIR/etcd" "$DIR/storage" "$DIR"/*.pid "$DIR"/*.port "$DIR"/*.log "$DIR"/*.kubeconfig "$DIR"/*.token \
  "$DIR/tokens.csv" "$DIR/apiserver.args" "$DIR/cluster.env" "$DIR/cluster.json"
touch "$DIR/$MARKER"

ok=0
cleanup() {
  if [[ "$ok" != 1 ]]; then
    log "startup failed; stopping what was started (logs kept in $DIR)"
    if [[ "$WITH_NODE" == 1 ]]; then node_down "$DIR" || true; node_unlock "$DIR" || true; fi
    stop_apiserver "$DIR" 5 || true
    stop_kine "$DIR" 5 || true
    stop_etcd "$DIR" 5 || true
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ "$WITH_NODE" == 1 ]]; then
  rm -rf "$DIR/host" "$DIR/kubelet" "$DIR/containerd" "$DIR/registry" "$DIR/cni" "$DIR/pod-logs"
  node_lock "$DIR"
  # Before anything runs: what the kubelet and containerd change on the host (put back by down.sh).
  node_record_host "$DIR"
fi

# --- certificates and keys --------------------------------------------------------------------------
PKI="$DIR/pki"; mkdir -p "$PKI"; chmod 700 "$PKI"
(
  cd "$PKI"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
    -subj "/CN=vigil-test-ca" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
  openssl req -new -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr \
    -subj "/CN=kube-apiserver" 2>/dev/null
  printf '%s\n' \
    "basicConstraints=critical,CA:FALSE" \
    "keyUsage=critical,digitalSignature,keyEncipherment" \
    "extendedKeyUsage=serverAuth" \
    "subjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local" \
    > apiserver.ext
  openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out apiserver.crt \
    -days 3650 -extfile apiserver.ext 2>/dev/null
  # Service-account token signing key pair (RS256).
  openssl genrsa -out sa.key 2048 2>/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  rm -f apiserver.csr ca.srl
) || die "certificate generation with openssl failed"
if [[ "$WITH_NODE" == 1 ]]; then node_pki "$PKI"; fi

# --- static tokens ----------------------------------------------------------------------------------
ADMIN_TOKEN="$(openssl rand -hex 24)"
AGENT_TOKEN="$(openssl rand -hex 24)"
NODE_TOKEN="$(openssl rand -hex 24)"
printf '%s' "$ADMIN_TOKEN" > "$DIR/admin.token"
printf '%s' "$AGENT_TOKEN" > "$DIR/agent.token"
# token,user,uid,"groups". The agent user has no groups (only system:authenticated): bind RBAC to it.
{
  printf '%s,vigil-admin,vigil-admin-uid,"system:masters"\n' "$ADMIN_TOKEN"
  printf '%s,vigil-agent,vigil-agent-uid\n' "$AGENT_TOKEN"
  if [[ "$WITH_NODE" == 1 ]]; then
    printf '%s,system:node:%s,%s-uid,"system:nodes"\n' "$NODE_TOKEN" "$NODE_NAME" "$NODE_NAME"
  fi
} > "$DIR/tokens.csv"
chmod 600 "$DIR/tokens.csv" "$DIR/admin.token" "$DIR/agent.token"

# --- storage + apiserver ------------------------------------------------------------------------------
echo "$STORAGE" > "$DIR/storage"
if [[ "$STORAGE" == etcd ]]; then
  start_etcd "$DIR"
  STORE_PORT="$(cat "$DIR/etcd.port")"
else
  start_kine "$DIR"
  STORE_PORT="$(cat "$DIR/kine.port")"
fi

for attempt in 1 2 3; do
  PORT="$(free_port)"
  write_apiserver_args "$DIR" "$PORT" "$STORE_PORT"
  if [[ "$WITH_NODE" == 1 ]]; then
    # With a controller manager making ServiceAccounts, pods get their tokens the usual way.
    sed -i '/^--disable-admission-plugins=ServiceAccount$/d' "$DIR/apiserver.args"
    node_apiserver_args "$DIR" >> "$DIR/apiserver.args"
  fi
  if ( start_apiserver "$DIR" ); then break; fi
  if [[ "$attempt" -lt 3 ]] && tail -n 40 "$DIR/apiserver.log" | grep -qi 'address already in use'; then
    log "port $PORT taken, retrying"; continue
  fi
  die "kube-apiserver failed to start"
done

SERVER="https://127.0.0.1:$PORT"
CA_DATA="$(base64 -w0 < "$PKI/ca.crt")"
write_kubeconfig() { # file user token
  cat > "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: vigil-test
  cluster:
    server: $SERVER
    certificate-authority-data: $CA_DATA
users:
- name: $2
  user:
    token: $3
contexts:
- name: $2@vigil-test
  context:
    cluster: vigil-test
    user: $2
current-context: $2@vigil-test
EOF
  chmod 600 "$1"
}
write_kubeconfig "$DIR/admin.kubeconfig" vigil-admin "$ADMIN_TOKEN"
write_kubeconfig "$DIR/agent.kubeconfig" vigil-agent "$AGENT_TOKEN"

NODE_ENV=""; NODE_JSON=""
if [[ "$WITH_NODE" == 1 ]]; then
  node_up "$DIR" "$SERVER" "$NODE_TOKEN"
  REGISTRY="127.0.0.1:$(cat "$DIR/registry.port")"
  NODE_ENV="VIGIL_NODE_NAME=$NODE_NAME
VIGIL_NODE_IP=$NODE_IP
VIGIL_REGISTRY=$REGISTRY
VIGIL_CONTAINERD_SOCKET=$DIR/containerd/containerd.sock
VIGIL_KUBELET_PORT=$(cat "$DIR/kubelet.port")"
  NODE_JSON="
  \"node\": {\"name\": \"$NODE_NAME\", \"ip\": \"$NODE_IP\"},
  \"registry\": \"$REGISTRY\",
  \"containerdSocket\": \"$DIR/containerd/containerd.sock\",
  \"kubeletPort\": $(cat "$DIR/kubelet.port"),"
fi

cat > "$DIR/cluster.env" <<EOF
VIGIL_CLUSTER_DIR=$DIR
KUBECONFIG=$DIR/admin.kubeconfig
VIGIL_APISERVER_URL=$SERVER
VIGIL_APISERVER_PORT=$PORT
VIGIL_CA_FILE=$PKI/ca.crt
VIGIL_ADMIN_TOKEN_FILE=$DIR/admin.token
VIGIL_AGENT_TOKEN_FILE=$DIR/agent.token
VIGIL_AGENT_KUBECONFIG=$DIR/agent.kubeconfig
VIGIL_STORAGE=$STORAGE
VIGIL_${STORAGE^^}_PORT=$STORE_PORT
EOF
if [[ -n "$NODE_ENV" ]]; then printf '%s\n' "$NODE_ENV" >> "$DIR/cluster.env"; fi
cat > "$DIR/cluster.json" <<EOF
{
  "dir": "$DIR",
  "server": "$SERVER",
  "port": $PORT,
  "caFile": "$PKI/ca.crt",
  "kubeconfig": "$DIR/admin.kubeconfig",
  "adminToken": "$ADMIN_TOKEN",
  "adminTokenFile": "$DIR/admin.token",
  "agentUser": "vigil-agent",
  "agentToken": "$AGENT_TOKEN",
  "agentTokenFile": "$DIR/agent.token",
  "agentKubeconfig": "$DIR/agent.kubeconfig",
  "storage": "$STORAGE",
  "${STORAGE}Port": $STORE_PORT,
  "apiserverPid": $(cat "$DIR/apiserver.pid"),
  "${STORAGE}Pid": $(cat "$DIR/$STORAGE.pid"),$NODE_JSON
  "kubernetesVersion": "$K8S_VERSION",
  "${STORAGE}Version": "$( [[ "$STORAGE" == etcd ]] && echo "$ETCD_VERSION" || echo "$KINE_VERSION")"
}
EOF

ok=1
if [[ "$WITH_KARPENTER" == 1 ]]; then bash "$HERE/karpenter/up.sh" "$DIR" || die "Karpenter did not start (the control plane keeps running; down.sh stops it)"; fi
log "cluster up in $DIR (kube-apiserver $K8S_VERSION at $SERVER, $STORAGE $( [[ "$STORAGE" == etcd ]] && echo "$ETCD_VERSION" || echo "$KINE_VERSION") on :$STORE_PORT)"
echo "$DIR/admin.kubeconfig"

# A real Node for the test control plane (up.sh --with-node, down.sh): a local OCI registry (crane),
# containerd (Debian's 1.6) with runc and a bridge CNI, kube-scheduler, kube-controller-manager and the
# kubelet. Source after lib.sh; do not execute.
#
# The kubelet and containerd write outside DIR and change host settings, so only one such node may run
# on a host at a time (NODE_LOCK), and everything they change is recorded before start (DIR/host/) and
# put back by node_down.
# shellcheck shell=bash

NODE_NAME="${VIGIL_NODE_NAME:-vigil-node-1}"
# The Node's InternalIP: an address on the loopback device (node_up adds it, node_restore_host removes
# it), so every packet to it stays on this machine, while the API server, which refuses to proxy to
# 127/8, serves nodes/proxy to it (vigil logs). 198.18.0.0/15 is reserved for test beds (RFC 2544).
NODE_IP=198.18.0.10
NODE_LOCK=/run/vigil-node.lock
NODE_OWNER=/run/vigil-node.owner
NODE_BRIDGE=vigilbr0
NODE_POD_SUBNET=10.244.50.0/24
# Host settings the kubelet (setupKernelTunables) and the bridge CNI plugin (isGateway) change.
NODE_SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys
  kernel.keys.root_maxbytes net.ipv4.ip_forward net.ipv6.conf.all.forwarding)
# Fixed paths written whatever root/state dirs say: the device-plugin dir, pod log symlinks, containerd's
# shim sockets (/run/containerd/s), CNI result cache, pod network namespaces.
# /run/netns is shared with podman (netavark's netns-*): only our cni-* entries go, the folder only when empty.
NODE_FIXED_PATHS=(/var/lib/kubelet /var/log/pods /var/log/containers /run/containerd /var/lib/cni /run/netns
  /etc/cni /opt/cni /opt/containerd /var/lib/containerd /run/runc /etc/kubernetes)
NODE_IPTABLES_TABLES=(filter nat mangle)

# --- the host lock --------------------------------------------------------------------------------

# node_lock DIR: waits up to VIGIL_NODE_LOCK_WAIT s (default 600) for NODE_LOCK, then hands it to a
# holder process (DIR/node-lock.pid) that keeps it until down.sh. A holder whose DIR is gone (its
# test died without down.sh) is stale and is stopped. VIGIL_NODE_LOCK_HELD=1: the caller already holds
# the lock (a test that snapshots the host before up.sh and after down.sh, with no other node between).
node_lock() {
  local dir="$1" wait="${VIGIL_NODE_LOCK_WAIT:-600}" owner="" opid=""
  if [[ "${VIGIL_NODE_LOCK_HELD:-0}" == 1 ]]; then
    flock -n "$NODE_LOCK" true 2>/dev/null && die "VIGIL_NODE_LOCK_HELD=1 but nobody holds $NODE_LOCK"
    node_reclaim "$dir"
    printf '%s caller\n' "$dir" > "$NODE_OWNER"
    return 0
  fi
  exec 8>>"$NODE_LOCK"
  if ! flock -n 8; then
    if [[ -s "$NODE_OWNER" ]]; then read -r owner opid < "$NODE_OWNER" || true; fi
    if [[ -n "$owner" && ! -d "$owner" && "$opid" =~ ^[0-9]+$ ]] \
      && [[ "$(tr '\0' ' ' < "/proc/$opid/cmdline" 2>/dev/null)" == "sleep infinity "* ]]; then
      log "node lock held by a stale holder (pid $opid, $owner is gone); stopping it"
      kill -TERM "$opid" 2>/dev/null || true
    fi
    log "another --with-node cluster runs on this host (${owner:-unknown}); waiting up to ${wait}s for $NODE_LOCK"
    flock -w "$wait" 8 || { exec 8>&-; die "another --with-node cluster (${owner:-unknown}) holds $NODE_LOCK; only one node cluster can run per host (stop it with down.sh)"; }
  fi
  # The holder inherits fd 8 (and with it the lock); up.sh closes its own copy so that nothing else
  # it starts keeps the lock alive.
  node_reclaim "$dir"
  launch "$dir" node-lock sleep infinity
  exec 8>&-
  printf '%s %s\n' "$dir" "$(cat "$dir/node-lock.pid")" > "$NODE_OWNER"
}

# node_reclaim DIR: with the lock taken, no other node cluster runs, so one that NODE_OWNER still names
# ended without down.sh: every process killed (a machine's session ended mid-test) frees the lock but
# leaves the host changed, and the next start failed on "iptables: Chain already exists". Its own
# record puts the host back (down.sh, as for any stop); what no record covers (its folder gone) but
# only a node cluster makes, this cluster's fixed chains and address, goes too. Before node_record_host.
node_reclaim() {
  local dir="$1" owner="" t c
  if [[ -s "$NODE_OWNER" ]]; then read -r owner _ < "$NODE_OWNER" || true; fi
  if [[ -n "$owner" && "$owner" != "$dir" && -d "$owner/host" ]]; then
    log "the node cluster in $owner ended without down.sh; stopping what is left of it and putting the host back"
    bash "$VIGIL_REPO_ROOT/test/cluster/down.sh" "$owner" >&2 || log "down.sh $owner failed; going on"
  fi
  rm -f "$NODE_OWNER"
  for t in nat filter; do
    for c in KUBE-VIGIL-APISERVER KUBE-VIGIL-SERVICE-RANGE; do
      iptables -t "$t" -S "$c" >/dev/null 2>&1 || continue
      log "removing the iptables chain $t/$c an earlier node cluster left"
      while iptables -t "$t" -D OUTPUT -j "$c" 2>/dev/null; do :; done
      iptables -t "$t" -F "$c" && iptables -t "$t" -X "$c"
    done
  done
  if ip -o addr show dev lo | grep -qF " $NODE_IP/32 "; then
    log "removing the node address $NODE_IP that an earlier node cluster left on lo"
    ip addr del "$NODE_IP/32" dev lo
  fi
}

node_unlock() {
  local dir="$1" owner=""
  if [[ -s "$NODE_OWNER" ]]; then read -r owner _ < "$NODE_OWNER" || true; fi
  if [[ "$owner" == "$dir" ]]; then rm -f "$NODE_OWNER"; fi
  stop_pid "$dir/node-lock.pid" sleep 5
}

# --- recording and restoring the host ----------------------------------------------------------------

ipt() { local fam="$1"; shift; if [[ "$fam" == 6 ]]; then ip6tables "$@"; else iptables "$@"; fi; }
ipt_save() { local fam="$1"; shift; if [[ "$fam" == 6 ]]; then ip6tables-save "$@"; else iptables-save "$@"; fi; }

# node_record_host DIR: what node_restore_host needs, in DIR/host/.
node_record_host() {
  local h="$1/host" k p t fam
  rm -rf "$h"; mkdir -p "$h"
  for k in "${NODE_SYSCTLS[@]}"; do
    if [[ -e "/proc/sys/${k//.//}" ]]; then printf '%s %s\n' "$k" "$(sysctl -n "$k")"; fi
  done > "$h/sysctl"
  for fam in 4 6; do
    for t in "${NODE_IPTABLES_TABLES[@]}"; do ipt_save "$fam" -t "$t" > "$h/ip${fam}tables-$t" 2>/dev/null || true; done
  done
  find /sys/fs/cgroup -mindepth 1 -type d 2>/dev/null | grep '/kubepods' > "$h/cgroups" || true
  cp /proc/self/mountinfo "$h/mountinfo"
  ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' > "$h/links"
  ip -o addr show dev lo | awk '{ print $4 }' > "$h/lo-addrs"
  for p in "${NODE_FIXED_PATHS[@]}"; do if [[ -e "$p" || -L "$p" ]]; then echo "$p"; fi; done > "$h/paths"
}

# Rules as iptables-save prints them, without counters, for comparison.
ipt_rules() { sed -e 's/^\(:[^ ]* [^ ]*\) \[[0-9]*:[0-9]*\]/\1/' -e 's/^\[[0-9]*:[0-9]*\] //' | grep -v '^#'; }

# node_restore_iptables DIR: deletes the rules and chains the kubelet added (KUBE-*), leaving any rule
# someone else added meanwhile alone (a whole-table restore would undo those too).
node_restore_iptables() {
  local h="$1/host" fam t rule chain
  for fam in 4 6; do
    for t in "${NODE_IPTABLES_TABLES[@]}"; do
      [[ -f "$h/ip${fam}tables-$t" ]] || continue
      local before; before="$(ipt_rules < "$h/ip${fam}tables-$t")"
      # Jumps into KUBE-* chains from other chains, then the KUBE-* chains themselves.
      while IFS= read -r rule; do
        [[ -n "$rule" ]] || continue
        grep -qxF -- "$rule" <<<"$before" && continue
        eval "ipt $fam -t $t -D ${rule#-A }" 2>/dev/null || log "could not delete ip${fam}tables -t $t rule: $rule"
      done < <(ipt_save "$fam" -t "$t" 2>/dev/null | ipt_rules | grep -E '^-A ' | grep -v '^-A KUBE-' | grep -- 'KUBE-' || true)
      while IFS= read -r chain; do
        [[ -n "$chain" ]] || continue
        grep -qE "^:$chain " <<<"$before" && continue
        ipt "$fam" -t "$t" -F "$chain" 2>/dev/null || true
      done < <(ipt_save "$fam" -t "$t" 2>/dev/null | sed -n 's/^:\(KUBE-[^ ]*\) .*/\1/p')
      while IFS= read -r chain; do
        [[ -n "$chain" ]] || continue
        grep -qE "^:$chain " <<<"$before" && continue
        ipt "$fam" -t "$t" -X "$chain" 2>/dev/null || log "could not delete ip${fam}tables -t $t chain $chain"
      done < <(ipt_save "$fam" -t "$t" 2>/dev/null | sed -n 's/^:\(KUBE-[^ ]*\) .*/\1/p')
    done
  done
}

# Mount points (mountinfo field 5, octal escapes kept) under the given prefixes, deepest first.
mounts_under() {
  awk '{ print $5 }' /proc/self/mountinfo | while IFS= read -r m; do
    local p; for p in "$@"; do if [[ "$m" == "$p" || "$m" == "$p"/* || ( "$p" == *- && "$m" == "$p"* ) ]]; then echo "$m"; break; fi; done
  done | awk '{ print length($0) " " $0 }' | sort -rn | cut -d' ' -f2-
}

node_restore_host() {
  local dir="$1" h="$1/host" k v m p cg
  [[ -d "$h" ]] || return 0
  # Mounts: pod volumes (tmpfs), container rootfs (overlay), sandbox shm, pod network namespaces.
  local -a prefixes=("$dir" /var/lib/kubelet /run/containerd /run/netns/cni-)
  local pass left
  for pass in 1 2 3; do
    # Mount points stay escaped as mountinfo writes them (\040 for a space) until unmounted.
    left="$(mounts_under "${prefixes[@]}" | grep -vxFf <(awk '{ print $5 }' "$h/mountinfo") || true)"
    [[ -z "$left" ]] && break
    while IFS= read -r m; do
      m="$(printf '%b' "${m//\\/\\0}")"
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
    done <<<"$left"
    sleep 0.2
  done
  # cgroups the kubelet made (/kubepods in every hierarchy), children first.
  while IFS= read -r cg; do
    grep -qxF "$cg" "$h/cgroups" && continue
    rmdir "$cg" 2>/dev/null || log "could not remove cgroup $cg"
  done < <(find /sys/fs/cgroup -mindepth 1 -depth -type d 2>/dev/null | grep '/kubepods' || true)
  # Links: the CNI bridge and its veths.
  if ! grep -qxF "$NODE_BRIDGE" "$h/links" && ip link show "$NODE_BRIDGE" >/dev/null 2>&1; then
    while IFS= read -r v; do if [[ -n "$v" ]]; then ip link delete "$v" 2>/dev/null || true; fi; done \
      < <(ip -o link show master "$NODE_BRIDGE" | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }')
    ip link delete "$NODE_BRIDGE" || log "could not delete bridge $NODE_BRIDGE"
  fi
  if [[ -f "$h/lo-addrs" ]] && ! grep -qxF "$NODE_IP/32" "$h/lo-addrs"; then
    ip addr del "$NODE_IP/32" dev lo 2>/dev/null || true
  fi
  node_restore_iptables "$dir"
  while read -r k v; do
    if [[ -n "$k" && "$(sysctl -n "$k" 2>/dev/null)" != "$v" ]]; then sysctl -q -w "$k=$v" >/dev/null || log "could not restore $k=$v"; fi
  done < "$h/sysctl"
  rm -f /run/netns/cni-* 2>/dev/null || true
  for p in "${NODE_FIXED_PATHS[@]}"; do
    grep -qxF "$p" "$h/paths" && continue
    if [[ "$p" == /run/netns ]]; then rmdir "$p" 2>/dev/null || true; continue; fi
    if [[ -e "$p" || -L "$p" ]]; then rm -rf --one-file-system "$p"; fi
  done
  rm -rf "$h"
}

# --- start ------------------------------------------------------------------------------------------

# PKI and token additions, called by up.sh before the API server starts.
node_pki() { # PKI_DIR
  (
    cd "$1"
    openssl req -new -newkey rsa:2048 -nodes -keyout kubelet-client.key -out kubelet-client.csr \
      -subj "/O=system:masters/CN=kube-apiserver-kubelet-client" 2>/dev/null
    printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
      "extendedKeyUsage=clientAuth" > kubelet-client.ext
    openssl x509 -req -in kubelet-client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out kubelet-client.crt \
      -days 3650 -extfile kubelet-client.ext 2>/dev/null
    rm -f kubelet-client.csr kubelet-client.ext ca.srl
  ) || die "kubelet client certificate generation failed"
}

node_apiserver_args() { # DIR
  printf '%s\n' "--kubelet-client-certificate=$1/pki/kubelet-client.crt" "--kubelet-client-key=$1/pki/kubelet-client.key" \
    "--kubelet-preferred-address-types=InternalIP,Hostname"
}

wait_listen() { # DIR NAME BINARY PORT
  local i
  for (( i = 0; i < 300; i++ )); do
    pid_alive "$1/$2.pid" "$3" || { tail_log "$1/$2.log"; die "$2 exited during startup (log: $1/$2.log)"; }
    pid_listens "$(cat "$1/$2.pid")" "$4" && return 0
    sleep 0.1
  done
  tail_log "$1/$2.log"; die "$2 did not listen on 127.0.0.1:$4 within 30s"
}

node_start_registry() {
  local dir="$1" port
  mkdir -p "$dir/registry"
  port="$(free_port)"
  launch "$dir" registry "$CRANE_BIN" registry serve --address "127.0.0.1:$port" --disk "$dir/registry"
  wait_listen "$dir" registry "$CRANE_BIN" "$port"
  echo "$port" > "$dir/registry.port"
  log "registry on 127.0.0.1:$port (storage $dir/registry)"
}

# hosts.toml for one registry host name: pulled over plain HTTP from the local registry.
node_registry_host() { # CERTS_D HOST REGISTRY
  mkdir -p "$1/$2"
  cat > "$1/$2/hosts.toml" <<EOF
server = "http://$3"

[host."http://$3"]
  capabilities = ["pull", "resolve"]
EOF
}

node_start_containerd() {
  local dir="$1" reg="$2" c="$1/containerd"
  mkdir -p "$c/root" "$c/state" "$c/certs.d" "$c/opt" "$dir/cni/net.d" "$dir/cni/ipam"
  node_registry_host "$c/certs.d" "$reg" "$reg"
  # The chart's default image registry, served from the local one: nothing is pulled from outside.
  node_registry_host "$c/certs.d" ghcr.io "$reg"
  cat > "$dir/cni/net.d/10-vigil.conflist" <<EOF
{"cniVersion":"1.0.0","name":"vigil-bridge","plugins":[{"type":"bridge","bridge":"$NODE_BRIDGE","isGateway":true,"ipMasq":false,
 "ipam":{"type":"host-local","dataDir":"$dir/cni/ipam","ranges":[[{"subnet":"$NODE_POD_SUBNET"}]]}}]}
EOF
  cat > "$c/config.toml" <<EOF
version = 2
root = "$c/root"
state = "$c/state"
[grpc]
  address = "$c/containerd.sock"
[ttrpc]
  address = "$c/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$c/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # This sandbox refuses negative oom_score_adj (runc fails on the pause container's -998).
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "runc"
        Root = "$c/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$dir/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$c/certs.d"
EOF
  launch "$dir" containerd containerd --config "$c/config.toml"
  local i
  for (( i = 0; i < 300; i++ )); do
    pid_alive "$dir/containerd.pid" containerd || { tail_log "$dir/containerd.log"; die "containerd exited during startup"; }
    ctr -a "$c/containerd.sock" version >/dev/null 2>&1 && break
    sleep 0.1
  done
  (( i < 300 )) || { tail_log "$dir/containerd.log"; die "containerd did not answer on $c/containerd.sock within 30s"; }
  ctr -a "$c/containerd.sock" -n k8s.io images import "$PAUSE_TAR" >/dev/null \
    || die "importing the pause image into containerd failed"
  log "containerd $(containerd --version | awk '{ print $3 }') on $c/containerd.sock (pause image $PAUSE_IMAGE)"
}

node_start_controllers() {
  local dir="$1" kc="$1/admin.kubeconfig"
  launch "$dir" kube-controller-manager "$KUBE_CONTROLLER_MANAGER_BIN" --kubeconfig="$kc" \
    --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" --leader-elect=false \
    --bind-address=127.0.0.1 --secure-port=0 \
    --service-account-private-key-file="$dir/pki/sa.key" --root-ca-file="$dir/pki/ca.crt" \
    --use-service-account-credentials=false
  launch "$dir" kube-scheduler "$KUBE_SCHEDULER_BIN" --kubeconfig="$kc" \
    --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" --leader-elect=false \
    --bind-address=127.0.0.1 --secure-port=0
  sleep 0.5
  pid_alive "$dir/kube-controller-manager.pid" kube-controller-manager || { tail_log "$dir/kube-controller-manager.log"; die "kube-controller-manager exited"; }
  pid_alive "$dir/kube-scheduler.pid" kube-scheduler || { tail_log "$dir/kube-scheduler.log"; die "kube-scheduler exited"; }
}

node_start_kubelet() {
  local dir="$1" server="$2" token="$3" k="$1/kubelet" port
  mkdir -p "$k/root" "$dir/pod-logs"
  port="$(free_port)"
  echo "$port" > "$dir/kubelet.port"
  cat > "$k/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: vigil-test
  cluster: {server: "$server", certificate-authority: "$dir/pki/ca.crt"}
users:
- name: $NODE_NAME
  user: {token: "$token"}
contexts:
- name: node
  context: {cluster: vigil-test, user: $NODE_NAME}
current-context: node
EOF
  chmod 600 "$k/kubeconfig"
  cat > "$k/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: $port
readOnlyPort: 0
healthzPort: 0
cgroupDriver: cgroupfs
failSwapOn: false
# The sandbox refuses negative oom_score_adj.
oomScoreAdj: 0
maxOpenFiles: 20000
containerRuntimeEndpoint: unix://$dir/containerd/containerd.sock
imageServiceEndpoint: unix://$dir/containerd/containerd.sock
podLogsDir: $dir/pod-logs
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $dir/pki/ca.crt}
authorization:
  mode: Webhook
# A shared test machine's disk may be fuller than the defaults allow: no eviction, no image GC.
evictionHard: {memory.available: "50Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
resolvConf: /etc/resolv.conf
EOF
  # The kubelet listens on, and publishes as InternalIP, NODE_IP only (node_up puts it on lo).
  launch "$dir" kubelet "$KUBELET_BIN" --config="$k/config.yaml" --kubeconfig="$k/kubeconfig" \
    --root-dir="$k/root" --hostname-override="$NODE_NAME" --node-ip="$NODE_IP" --v=1
}

node_api_get() { apiserver_curl "$1" "$2" -f 2>/dev/null; }

node_wait_ready() {
  local dir="$1" timeout="${VIGIL_NODE_TIMEOUT:-180}" deadline state
  deadline=$(( $(date +%s) + timeout ))
  while :; do
    pid_alive "$dir/kubelet.pid" kubelet || { tail_log "$dir/kubelet.log" 40; die "kubelet exited (log: $dir/kubelet.log)"; }
    state="$(node_api_get "$dir" "/api/v1/nodes/$NODE_NAME" | node -e '
      let s = ""; process.stdin.on("data", (d) => (s += d)).on("end", () => {
        try {
          const n = JSON.parse(s);
          const ready = (n.status?.conditions ?? []).find((c) => c.type === "Ready")?.status ?? "none";
          const notReadyTaint = (n.spec?.taints ?? []).some((t) => t.key === "node.kubernetes.io/not-ready");
          const ip = (n.status?.addresses ?? []).some((a) => a.type === "InternalIP" && a.address === process.argv[1]);
          console.log(`${ready} ${notReadyTaint ? "tainted" : "untainted"} ${ip ? "ip" : "noip"}`);
        } catch { console.log("absent"); }
      });' "$NODE_IP" 2>/dev/null || echo absent)"
    [[ "$state" == "True untainted ip" ]] && break
    if (( $(date +%s) >= deadline )); then
      tail_log "$dir/kubelet.log" 40; tail_log "$dir/containerd.log" 20
      die "Node $NODE_NAME not Ready within ${timeout}s (last: $state; logs in $dir)"
    fi
    sleep 0.5
  done
  # The controller manager's service-account controller makes the default ServiceAccounts pods need.
  for (( i = 0; i < 120; i++ )); do
    node_api_get "$dir" /api/v1/namespaces/default/serviceaccounts/default >/dev/null && return 0
    sleep 0.5
  done
  die "kube-controller-manager did not create the default ServiceAccount within 60s"
}

# node_service_route DIR: in-cluster clients (the chart's host-network pod: KUBERNETES_SERVICE_HOST
# 10.0.0.1:443) reach the API server on loopback, as kube-proxy would route the kubernetes Service
# (it cannot here: the API server publishes no loopback endpoint). Without this, 10.0.0.1 leaves the
# machine. Anything else to the service range is refused. KUBE-* chains: node_restore_iptables
# removes them.
node_service_route() {
  local port; port="$(cat "$1/apiserver.port")"
  iptables -t nat -N KUBE-VIGIL-APISERVER
  iptables -t nat -A KUBE-VIGIL-APISERVER -d 10.0.0.1/32 -p tcp --dport 443 -j DNAT --to-destination "127.0.0.1:$port"
  iptables -t nat -I OUTPUT -j KUBE-VIGIL-APISERVER
  iptables -t filter -N KUBE-VIGIL-SERVICE-RANGE
  iptables -t filter -A KUBE-VIGIL-SERVICE-RANGE -d 10.0.0.0/24 -j REJECT
  iptables -t filter -I OUTPUT -j KUBE-VIGIL-SERVICE-RANGE
}

# node_up DIR SERVER NODE_TOKEN: everything after the API server is ready.
node_up() {
  local dir="$1" reg
  ip addr replace "$NODE_IP/32" dev lo
  node_service_route "$dir"
  node_start_registry "$dir"
  reg="127.0.0.1:$(cat "$dir/registry.port")"
  node_start_containerd "$dir" "$reg"
  node_start_controllers "$dir"
  node_start_kubelet "$dir" "$2" "$3"
  node_wait_ready "$dir"
  log "node $NODE_NAME Ready (kubelet on $NODE_IP:$(cat "$dir/kubelet.port"), registry $reg)"
}

# --- stop -------------------------------------------------------------------------------------------

# Kills every container containerd runs for this node (kubelet first, so it starts none again).
node_kill_containers() {
  local sock="$1/containerd/containerd.sock" id i
  [[ -S "$sock" ]] && pid_alive "$1/containerd.pid" containerd || return 0
  local -a c=(ctr -a "$sock" -n k8s.io)
  for id in $("${c[@]}" tasks ls -q 2>/dev/null); do "${c[@]}" tasks kill -s SIGKILL -a "$id" >/dev/null 2>&1 || true; done
  for (( i = 0; i < 50; i++ )); do
    [[ -z "$("${c[@]}" tasks ls 2>/dev/null | awk 'NR > 1 && $3 != "STOPPED"')" ]] && break
    sleep 0.1
  done
  for id in $("${c[@]}" tasks ls -q 2>/dev/null); do "${c[@]}" tasks delete -f "$id" >/dev/null 2>&1 || true; done
  for id in $("${c[@]}" containers ls -q 2>/dev/null); do "${c[@]}" containers delete "$id" >/dev/null 2>&1 || true; done
}

# Shims outlive containerd on purpose (restarts keep containers); ours are told apart by their
# -address argument.
node_kill_shims() {
  local sock="$1/containerd/containerd.sock" p
  for p in /proc/[0-9]*; do
    if [[ "$( { tr '\0' ' ' < "$p/cmdline"; } 2>/dev/null)" == *containerd-shim*"-address $sock "* ]]; then kill -KILL "${p#/proc/}" 2>/dev/null || true; fi
  done
  return 0
}

node_down() {
  local dir="$1"
  stop_pid "$dir/kubelet.pid" kubelet 20
  node_kill_containers "$dir"
  stop_pid "$dir/containerd.pid" containerd 20
  node_kill_shims "$dir"
  stop_pid "$dir/kube-scheduler.pid" kube-scheduler 10
  stop_pid "$dir/kube-controller-manager.pid" kube-controller-manager 10
  stop_pid "$dir/registry.pid" crane 10
  node_restore_host "$dir"
  rm -f "$dir/registry.port" "$dir/kubelet.port"
}

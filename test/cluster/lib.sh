# Shared helpers for up.sh / down.sh / apiserver.sh. Source it; do not execute.
# shellcheck shell=bash
# shellcheck source=versions.sh
source "$(dirname "${BASH_SOURCE[0]}")/versions.sh"

VIGIL_LOG_PREFIX="${VIGIL_LOG_PREFIX:-cluster}"
log() { printf '[%s] %s\n' "$VIGIL_LOG_PREFIX" "$*" >&2; }
die() { printf '[%s] ERROR: %s\n' "$VIGIL_LOG_PREFIX" "$*" >&2; exit 1; }

# State dir: first positional argument, else $VIGIL_CLUSTER_DIR, else <repo>/.cluster. Made absolute.
resolve_dir() {
  local d="${1:-${VIGIL_CLUSTER_DIR:-$VIGIL_REPO_ROOT/.cluster}}"
  mkdir -p "$d"
  (cd "$d" && pwd)
}

MARKER=".vigil-cluster"

# A free TCP port on 127.0.0.1 (chosen by the kernel). Racy by nature; callers retry on bind failure.
free_port() {
  if command -v node >/dev/null 2>&1; then
    node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{process.stdout.write(String(s.address().port));s.close()})'
    return
  fi
  local p
  for _ in $(seq 1 200); do
    p=$(( 20000 + RANDOM % 40000 ))
    if ! port_open "$p"; then echo "$p"; return; fi
  done
  die "could not find a free port"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# pid_listens PID PORT: true when PID itself holds a socket listening on 127.0.0.1:PORT. A plain
# connect is not enough: free_port can hand the same port to two clusters started at once, and the
# other cluster's kine answering there would make this one share its storage.
pid_listens() {
  local pid="$1" local_addr inode fd
  local_addr="$(printf '0100007F:%04X' "$2")"
  inode="$(awk -v a="$local_addr" '$2 == a && $4 == "0A" { print $10; exit }' /proc/net/tcp 2>/dev/null)"
  [[ -n "$inode" ]] || return 1
  for fd in /proc/"$pid"/fd/*; do
    [[ "$(readlink "$fd" 2>/dev/null)" == "socket:[$inode]" ]] && return 0
  done
  return 1
}

# pid_alive FILE BINARY_NAME: true when the pid in FILE runs BINARY_NAME (guards against pid reuse).
pid_alive() {
  local f="$1" name="$2" pid
  [[ -s "$f" ]] || return 1
  pid="$(cat "$f")"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  local cmd; cmd="$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null)" || return 1
  [[ "$cmd" == *"$name"* ]]
}

# stop_pid FILE BINARY_NAME [TIMEOUT_S]: SIGTERM, wait, then SIGKILL. Removes FILE.
stop_pid() {
  local f="$1" name="$2" timeout="${3:-15}" pid
  if ! pid_alive "$f" "$name"; then rm -f "$f"; return 0; fi
  pid="$(cat "$f")"
  kill -TERM "$pid" 2>/dev/null || true
  local i
  for (( i = 0; i < timeout * 10; i++ )); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$f"; return 0; }
    sleep 0.1
  done
  log "$name (pid $pid) did not exit after ${timeout}s; sending SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  for (( i = 0; i < 50; i++ )); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  rm -f "$f"
}

# launch DIR NAME BINARY ARGS... : start in the background, stdout/stderr appended to DIR/NAME.log,
# pid written to DIR/NAME.pid. Not put in its own session on purpose: Ctrl-C on the terminal that ran
# up.sh (same process group) also stops the servers instead of leaving orphans.
launch() {
  local dir="$1" name="$2"; shift 2
  {
    printf '\n===== %s starting %s =====\n' "$(date -u +%FT%TZ)" "$name"
    printf '%q ' "$@"; printf '\n'
  } >> "$dir/$name.log"
  (cd "$dir" && exec "$@" >> "$dir/$name.log" 2>&1 < /dev/null) &
  local pid=$!
  echo "$pid" > "$dir/$name.pid"
  wait_exec "$pid" "$1"
}

# wait_exec PID BINARY: $! is a subshell (a copy of this script) until it has exec'd BINARY, so a
# check by name (pid_alive) made in that window sees the wrong process. Wait until PID runs BINARY
# or has exited (a failed exec; the caller's own checks report it), at most 10 s. The command line
# reads empty for a moment during exec, so only the process state says it has exited.
wait_exec() {
  local pid="$1" bin="$2" argv0 stat i
  for (( i = 0; i < 200; i++ )); do
    argv0=""; { IFS= read -r -d '' argv0 < "/proc/$pid/cmdline"; } 2>/dev/null || true
    [[ "$argv0" == "$bin" ]] && return 0
    stat=""; { read -r stat < "/proc/$pid/stat"; } 2>/dev/null || true
    [[ -z "$stat" || "${stat##*) }" == Z* ]] && return 0
    sleep 0.05
  done
  log "pid $pid did not exec $bin within 10s"
}

tail_log() { [[ -f "$1" ]] && { echo "----- last lines of $1 -----" >&2; tail -n "${2:-30}" "$1" >&2; }; return 0; }

# --- kine ------------------------------------------------------------------------------------------

start_kine() {
  local dir="$1" port
  [[ -x "$KINE_BIN" ]] || die "kine binary missing at $KINE_BIN; run test/cluster/build.sh first"
  mkdir -p "$dir/kine"
  local attempt
  for attempt in 1 2 3 4 5; do
    port="$(free_port)"
    launch "$dir" kine "$KINE_BIN" \
      --listen-address="127.0.0.1:$port" \
      --endpoint="sqlite://$dir/kine/state.db?_journal=WAL&cache=shared&_busy_timeout=30000&_txlock=immediate" \
      --metrics-bind-address=0
    # Decide once whether kine died or timed out: re-checking after the loop could see a
    # different answer than the loop did and report the wrong failure.
    local i exited=0
    for (( i = 0; i < 300; i++ )); do
      if ! pid_alive "$dir/kine.pid" kine; then exited=1; break; fi
      if pid_listens "$(cat "$dir/kine.pid")" "$port"; then echo "$port" > "$dir/kine.port"; log "kine listening on 127.0.0.1:$port (pid $(cat "$dir/kine.pid"))"; return 0; fi
      sleep 0.1
    done
    if [[ "$exited" == 0 ]]; then
      stop_pid "$dir/kine.pid" kine
      tail_log "$dir/kine.log"; die "kine did not open 127.0.0.1:$port within 30s"
    fi
    if tail -n 20 "$dir/kine.log" | grep -qi 'address already in use'; then
      log "port $port taken, retrying ($attempt)"; continue
    fi
    tail_log "$dir/kine.log"; die "kine exited during startup"
  done
  die "kine: could not bind a free port after 5 attempts"
}

# --- etcd (up.sh --storage etcd) ---------------------------------------------------------------------

# start_etcd DIR: a single-member etcd on 127.0.0.1 (client and peer ports of its own), data in
# DIR/etcd; writes DIR/etcd.port (the client port, which also serves /metrics, /health and the v3 JSON
# gateway). fsync stays on, as in production: its cost is part of what the benches measure.
start_etcd() {
  local dir="$1" port peer
  [[ -x "$ETCD_BIN" ]] || die "etcd binary missing at $ETCD_BIN; run test/cluster/build-etcd.sh first"
  rm -rf "$dir/etcd"; mkdir -p "$dir/etcd"; chmod 700 "$dir/etcd"
  local attempt
  for attempt in 1 2 3 4 5; do
    port="$(free_port)"; peer="$(free_port)"
    [[ "$port" != "$peer" ]] || continue
    launch "$dir" etcd "$ETCD_BIN" \
      --name=vigil-test \
      --data-dir="$dir/etcd/data" \
      --listen-client-urls="http://127.0.0.1:$port" \
      --advertise-client-urls="http://127.0.0.1:$port" \
      --listen-peer-urls="http://127.0.0.1:$peer" \
      --initial-advertise-peer-urls="http://127.0.0.1:$peer" \
      --initial-cluster="vigil-test=http://127.0.0.1:$peer" \
      --initial-cluster-state=new \
      --log-level=warn
    local i exited=0
    for (( i = 0; i < 300; i++ )); do
      if ! pid_alive "$dir/etcd.pid" etcd; then exited=1; break; fi
      if pid_listens "$(cat "$dir/etcd.pid")" "$port" && curl -fsS --max-time 2 "http://127.0.0.1:$port/health" 2>/dev/null | grep -q '"health":"true"'; then
        echo "$port" > "$dir/etcd.port"
        log "etcd $ETCD_VERSION listening on 127.0.0.1:$port (peer :$peer, pid $(cat "$dir/etcd.pid"))"
        return 0
      fi
      sleep 0.1
    done
    if [[ "$exited" == 0 ]]; then
      stop_pid "$dir/etcd.pid" etcd
      tail_log "$dir/etcd.log"; die "etcd not healthy on 127.0.0.1:$port within 30s"
    fi
    if tail -n 20 "$dir/etcd.log" | grep -qi 'address already in use'; then
      log "port $port or $peer taken, retrying ($attempt)"; rm -rf "$dir/etcd/data"; continue
    fi
    tail_log "$dir/etcd.log"; die "etcd exited during startup"
  done
  die "etcd: could not bind free ports after 5 attempts"
}

stop_etcd() { stop_pid "$1/etcd.pid" etcd "${2:-10}"; }

# The storage up.sh started for DIR (DIR/storage; kine for clusters made before it existed).
storage_of() { if [[ -s "$1/storage" ]]; then cat "$1/storage"; else echo kine; fi; }

# --- kube-apiserver --------------------------------------------------------------------------------

# Writes DIR/apiserver.args (one flag per line) for the given ports. Everything is relative to DIR.
write_apiserver_args() {
  local dir="$1" port="$2" kport="$3"
  cat > "$dir/apiserver.args" <<EOF
--advertise-address=127.0.0.1
--bind-address=127.0.0.1
--secure-port=$port
--cert-dir=$dir/pki
--tls-cert-file=$dir/pki/apiserver.crt
--tls-private-key-file=$dir/pki/apiserver.key
--client-ca-file=$dir/pki/ca.crt
--etcd-servers=http://127.0.0.1:$kport
--token-auth-file=$dir/tokens.csv
--authorization-mode=Node,RBAC
--enable-admission-plugins=NodeRestriction
--disable-admission-plugins=ServiceAccount
--service-account-issuer=https://kubernetes.default.svc.cluster.local
--service-account-key-file=$dir/pki/sa.pub
--service-account-signing-key-file=$dir/pki/sa.key
--api-audiences=https://kubernetes.default.svc.cluster.local
--service-cluster-ip-range=10.0.0.0/24
--allow-privileged=true
--endpoint-reconciler-type=none
--profiling=false
EOF
  if [[ -n "${VIGIL_APISERVER_EXTRA_ARGS:-}" ]]; then
    # shellcheck disable=SC2086
    printf '%s\n' ${VIGIL_APISERVER_EXTRA_ARGS} >> "$dir/apiserver.args"
  fi
}

apiserver_curl() { # DIR PATH [curl args...]
  local dir="$1" path="$2"; shift 2
  curl -sS --max-time 5 --cacert "$dir/pki/ca.crt" -H "Authorization: Bearer $(cat "$dir/admin.token")" \
    "https://127.0.0.1:$(cat "$dir/apiserver.port")$path" "$@"
}

# start_apiserver DIR: starts kube-apiserver from DIR/apiserver.args and waits for /readyz.
start_apiserver() {
  local dir="$1" timeout="${VIGIL_CLUSTER_TIMEOUT:-180}"
  [[ -x "$KUBE_APISERVER_BIN" ]] || die "kube-apiserver binary missing at $KUBE_APISERVER_BIN; run test/cluster/build.sh first"
  [[ -f "$dir/apiserver.args" ]] || die "$dir/apiserver.args missing; was up.sh run for $dir?"
  local storage; storage="$(storage_of "$dir")"
  pid_alive "$dir/$storage.pid" "$storage" || die "$storage is not running for $dir (start the cluster with up.sh)"
  if pid_alive "$dir/apiserver.pid" kube-apiserver; then die "kube-apiserver already running (pid $(cat "$dir/apiserver.pid"))"; fi
  local port; port="$(sed -n 's/^--secure-port=//p' "$dir/apiserver.args")"
  if port_open "$port"; then die "port 127.0.0.1:$port is in use by another process"; fi
  echo "$port" > "$dir/apiserver.port"
  local -a args; mapfile -t args < "$dir/apiserver.args"
  launch "$dir" apiserver "$KUBE_APISERVER_BIN" "${args[@]}"
  local pid; pid="$(cat "$dir/apiserver.pid")"
  local deadline=$(( $(date +%s) + timeout )) code
  while :; do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail_log "$dir/apiserver.log" 40; rm -f "$dir/apiserver.pid"
      die "kube-apiserver exited during startup (log: $dir/apiserver.log)"
    fi
    code="$(apiserver_curl "$dir" /readyz -o /dev/null -w '%{http_code}' 2>/dev/null || true)"
    if [[ "$code" == 200 ]]; then
      # The bootstrap controller creates the 'default' namespace shortly after readiness.
      if [[ "$(apiserver_curl "$dir" /api/v1/namespaces/default -o /dev/null -w '%{http_code}' 2>/dev/null || true)" == 200 ]]; then
        break
      fi
    fi
    if (( $(date +%s) >= deadline )); then
      apiserver_curl "$dir" '/readyz?verbose' >&2 || true
      tail_log "$dir/apiserver.log" 40
      stop_pid "$dir/apiserver.pid" kube-apiserver
      die "kube-apiserver not ready within ${timeout}s (log: $dir/apiserver.log)"
    fi
    sleep 0.3
  done
  log "kube-apiserver ready on https://127.0.0.1:$port (pid $pid)"
}

stop_apiserver() { stop_pid "$1/apiserver.pid" kube-apiserver "${2:-20}"; }
stop_kine() { stop_pid "$1/kine.pid" kine "${2:-10}"; }

#!/usr/bin/env bash
# Stops the control plane started by up.sh (API server, then kine or etcd), by process id. Usage:
#   test/cluster/down.sh [--purge] [STATE_DIR]     (or VIGIL_CLUSTER_DIR=/tmp/x test/cluster/down.sh)
# --purge also deletes STATE_DIR (only if it is a Vigil cluster dir). Idempotent.
# A node started by up.sh --with-node is stopped first and the host put back as up.sh recorded it.
#   test/cluster/down.sh --stale   (the caller holds /run/vigil-node.lock): puts back what a node cluster
#   that ended without down.sh left on the host (node_reclaim); up.sh --with-node does it by itself.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VIGIL_LOG_PREFIX="down.sh"
# shellcheck source=lib.sh
source "$HERE/lib.sh"

PURGE=0; ARG=""
for a in "$@"; do
  case "$a" in
    --purge) PURGE=1 ;;
    --stale)
      # shellcheck source=node-lib.sh
      source "$HERE/node-lib.sh"
      flock -n "$NODE_LOCK" true 2>/dev/null && die "--stale: the caller must hold $NODE_LOCK"
      node_reclaim ""; exit 0 ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    -*) die "unknown option $a" ;;
    *) ARG="$a" ;;
  esac
done
DIR="${ARG:-${VIGIL_CLUSTER_DIR:-$VIGIL_REPO_ROOT/.cluster}}"
if [[ ! -d "$DIR" ]]; then log "$DIR does not exist; nothing to stop"; exit 0; fi
DIR="$(cd "$DIR" && pwd)"
[[ -e "$DIR/$MARKER" ]] || die "$DIR is not a Vigil cluster dir (no $MARKER)"

stop_pid "$DIR/karpenter-vigil.pid" karpenter-vigil; stop_pid "$DIR/kwok.pid" kwok
if [[ -f "$DIR/node-lock.pid" || -d "$DIR/host" ]]; then
  # shellcheck source=node-lib.sh
  source "$HERE/node-lib.sh"
  node_down "$DIR"
  node_unlock "$DIR"
fi
stop_apiserver "$DIR"
stop_kine "$DIR"
stop_etcd "$DIR"
rm -f "$DIR/apiserver.port" "$DIR/kine.port" "$DIR/etcd.port"
if [[ "$PURGE" == 1 ]]; then
  rm -rf "$DIR"
  log "stopped and removed $DIR"
else
  log "stopped cluster in $DIR (logs kept)"
fi

#!/usr/bin/env bash
# Stops/starts only kube-apiserver of a cluster started by up.sh; its storage (kine or etcd) and data keep running,
# and the apiserver comes back on the same port with the same certs, tokens and data.
#   test/cluster/apiserver.sh stop|start|restart|status [STATE_DIR]
# STATE_DIR defaults to $VIGIL_CLUSTER_DIR, then <repo>/.cluster. `start` waits for /readyz.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VIGIL_LOG_PREFIX="apiserver.sh"
# shellcheck source=lib.sh
source "$HERE/lib.sh"

CMD="${1:-}"; DIR="${2:-${VIGIL_CLUSTER_DIR:-$VIGIL_REPO_ROOT/.cluster}}"
[[ -d "$DIR" && -e "$DIR/$MARKER" ]] || die "$DIR is not a Vigil cluster dir (run up.sh first)"
DIR="$(cd "$DIR" && pwd)"

case "$CMD" in
  stop)    stop_apiserver "$DIR"; log "kube-apiserver stopped ($DIR)" ;;
  start)   start_apiserver "$DIR" ;;
  restart) stop_apiserver "$DIR"; start_apiserver "$DIR" ;;
  status)
    if pid_alive "$DIR/apiserver.pid" kube-apiserver; then echo "running $(cat "$DIR/apiserver.pid")"; else echo stopped; exit 3; fi ;;
  *) die "usage: $0 stop|start|restart|status [STATE_DIR]" ;;
esac

#!/usr/bin/env bash
# Publishes Vigil to an OCI registry the way a release does, under the published names with only the
# registry changed:
#   image  REGISTRY/vigil-dev/vigil:<appVersion>       (ghcr.io/vigil-dev/vigil:<appVersion>)
#   chart  oci://REGISTRY/vigil-dev/charts/vigil <version> (oci://ghcr.io/vigil-dev/charts/vigil)
#
#   test/deploy/publish.sh REGISTRY        e.g. 127.0.0.1:5000 (plain HTTP: a loopback test registry)
#
# The image is localhost/vigil:test from test/deploy/build-image.sh (podman, the Dockerfile), reused
# when its dev.vigil.context label matches the current tree (test/deploy/context-hash.sh; image.test.ts
# builds the same tag), built otherwise. Pushed with `podman push`, the chart with `helm package` and
# `helm push`. Helm's configuration and cache go to a temporary directory unless HELM_CONFIG_HOME,
# HELM_CACHE_HOME and HELM_DATA_HOME are set (nothing written to the caller's home).
# Prints one JSON object on stdout: {image, digest, chart, chartVersion, appVersion, built,
# buildSeconds, pushSeconds}. Progress goes to stderr.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
REGISTRY="${1:?usage: publish.sh REGISTRY}"
# shellcheck source=../cluster/versions.sh
source "$ROOT/test/cluster/versions.sh"
CACHE="${VIGIL_CACHE_DIR:-$ROOT/.cache}/image"
LOCAL=localhost/vigil:test

log() { printf '[publish] %s\n' "$*" >&2; }
die() { printf '[publish] ERROR: %s\n' "$*" >&2; exit 1; }
command -v podman >/dev/null || die "podman not found (.ci/run installs it)"
[[ -x "$HELM_BIN" ]] || die "helm not built ($HELM_BIN): run test/cluster/build.sh"

chart_field() { awk -v k="$1" '$1 == k":" { gsub(/"/, "", $2); print $2; exit }' "$ROOT/deploy/helm/vigil/Chart.yaml"; }
VERSION="$(chart_field version)"
APP_VERSION="$(chart_field appVersion)"
[[ -n "$VERSION" && -n "$APP_VERSION" ]] || die "no version/appVersion in deploy/helm/vigil/Chart.yaml"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if [[ -z "${HELM_CONFIG_HOME:-}" ]]; then
  export HELM_CONFIG_HOME="$work/helm/config" HELM_CACHE_HOME="$work/helm/cache" HELM_DATA_HOME="$work/helm/data"
fi

# The label is compared under build-image.sh's lock, so a build in progress (image.test.ts) is
# waited for and then reused rather than repeated.
current_image() {
  local want="$1" got
  mkdir -p "$CACHE"
  got="$(flock "$CACHE/.lock" podman image inspect "$LOCAL" \
    --format '{{.Id}} {{index .Config.Labels "dev.vigil.context"}}' 2>/dev/null || true)"
  [[ "${got#* }" == "$want" ]] && printf '%s' "${got%% *}"
}

t0=$(date +%s)
want="$(bash "$ROOT/test/deploy/context-hash.sh")"
built=false
id="$(current_image "$want" || true)"
if [[ -z "$id" ]]; then
  log "no $LOCAL for this tree ($want); building it"
  bash "$ROOT/test/deploy/build-image.sh" "$work/build" >"$work/build.json" || die "build-image.sh failed"
  rm -rf "$work/build"
  built=true
  id="$(current_image "$want" || true)"
  # The tree changed while it was built: push what was built, say so.
  if [[ -z "$id" ]]; then
    id="$(podman image inspect "$LOCAL" --format '{{.Id}}')"
    log "the tree changed during the build; pushing the image built from the earlier tree"
  fi
else
  log "reusing $LOCAL ${id:0:12}, built from this tree"
fi
t1=$(date +%s)

IMAGE="$REGISTRY/vigil-dev/vigil:$APP_VERSION"
log "podman push ${id:0:12} -> $IMAGE"
# By image ID, not tag: a concurrent rebuild may move the tag meanwhile.
podman push --tls-verify=false --digestfile "$work/digest" "$id" "docker://$IMAGE" >&2 || die "podman push failed"
DIGEST="$(cat "$work/digest")"

log "helm package + helm push oci://$REGISTRY/vigil-dev/charts"
"$HELM_BIN" package "$ROOT/deploy/helm/vigil" --destination "$work" >&2 || die "helm package failed"
"$HELM_BIN" push "$work/vigil-$VERSION.tgz" "oci://$REGISTRY/vigil-dev/charts" --plain-http >&2 || die "helm push failed"
t2=$(date +%s)

printf '{"image":"%s","digest":"%s","chart":"%s","chartVersion":"%s","appVersion":"%s","built":%s,"buildSeconds":%d,"pushSeconds":%d}\n' \
  "$IMAGE" "$DIGEST" "oci://$REGISTRY/vigil-dev/charts/vigil" "$VERSION" "$APP_VERSION" "$built" "$((t1 - t0))" "$((t2 - t1))"

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
# Prints one JSON object on stdout: {image, arches, digest, chart, chartVersion, appVersion, built,
# buildSeconds, pushSeconds}. Progress goes to stderr.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
REGISTRY="${1:?usage: publish.sh REGISTRY}"
# shellcheck source=../cluster/versions.sh
source "$ROOT/test/cluster/versions.sh"
CACHE="${VIGIL_CACHE_DIR:-$ROOT/.cache}/image"
LOCAL=localhost/vigil:test
# The architectures to publish: one image, or with several a manifest list naming each
# (VIGIL_IMAGE_ARCHES="amd64 arm64"; arm64 is built under qemu, see build-image.sh).
ARCHES="${VIGIL_IMAGE_ARCHES:-amd64}"

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
  local tag="$1" want="$2" got
  mkdir -p "$CACHE"
  got="$(flock "$CACHE/.lock" podman image inspect "$tag" \
    --format '{{.Id}} {{index .Config.Labels "dev.vigil.context"}}' 2>/dev/null || true)"
  [[ "${got#* }" == "$want" ]] && printf '%s' "${got%% *}"
}

# One architecture's image from this tree (into ID): reused when its label matches, built otherwise.
image_for() {
  local arch="$1" tag="$LOCAL" id
  [[ "$arch" == amd64 ]] || tag="$LOCAL-$arch"
  id="$(current_image "$tag" "$want" || true)"
  if [[ -z "$id" ]]; then
    log "no $tag for this tree ($want); building it"
    bash "$ROOT/test/deploy/build-image.sh" "$work/build" "$arch" >"$work/build.json" || die "build-image.sh $arch failed"
    rm -rf "$work/build"
    built=true
    id="$(current_image "$tag" "$want" || true)"
    # The tree changed while it was built: push what was built, say so.
    if [[ -z "$id" ]]; then
      id="$(podman image inspect "$tag" --format '{{.Id}}')"
      log "the tree changed during the build; pushing the $arch image built from the earlier tree"
    fi
  else
    log "reusing $tag ${id:0:12}, built from this tree"
  fi
  ID="$id"
}

t0=$(date +%s)
want="$(bash "$ROOT/test/deploy/context-hash.sh")"
built=false
read -r -a arches <<<"$ARCHES"
ids=()
for arch in "${arches[@]}"; do
  image_for "$arch"
  ids+=("$ID")
done
t1=$(date +%s)

IMAGE="$REGISTRY/vigil-dev/vigil:$APP_VERSION"
if ((${#arches[@]} == 1)); then
  log "podman push ${ids[0]:0:12} -> $IMAGE"
  # By image ID, not tag: a concurrent rebuild may move the tag meanwhile.
  podman push --tls-verify=false --digestfile "$work/digest" "${ids[0]}" "docker://$IMAGE" >&2 || die "podman push failed"
else
  # One manifest list (an OCI index) naming each architecture's image: a node pulls its own, the
  # chart names the one tag on every architecture.
  list="localhost/vigil-publish-$$:list"
  podman manifest create "$list" >&2
  for id in "${ids[@]}"; do podman manifest add "$list" "containers-storage:$id" >&2; done
  log "podman manifest push --all ($ARCHES) -> $IMAGE"
  podman manifest push --all --tls-verify=false --digestfile "$work/digest" "$list" "docker://$IMAGE" >&2 \
    || { podman manifest rm "$list" >/dev/null 2>&1; die "podman manifest push failed"; }
  podman manifest rm "$list" >/dev/null 2>&1 || true
fi
DIGEST="$(cat "$work/digest")"

log "helm package + helm push oci://$REGISTRY/vigil-dev/charts"
"$HELM_BIN" package "$ROOT/deploy/helm/vigil" --destination "$work" >&2 || die "helm package failed"
"$HELM_BIN" push "$work/vigil-$VERSION.tgz" "oci://$REGISTRY/vigil-dev/charts" --plain-http >&2 || die "helm push failed"
t2=$(date +%s)

printf '{"image":"%s","arches":"%s","digest":"%s","chart":"%s","chartVersion":"%s","appVersion":"%s","built":%s,"buildSeconds":%d,"pushSeconds":%d}\n' \
  "$IMAGE" "$ARCHES" "$DIGEST" "oci://$REGISTRY/vigil-dev/charts/vigil" "$VERSION" "$APP_VERSION" "$built" "$((t1 - t0))" "$((t2 - t1))"

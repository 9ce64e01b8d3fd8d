#!/usr/bin/env bash
# Prints a SHA-256 of everything the image build reads: the Dockerfile, .dockerignore,
# test/deploy/build-image.sh (it picks the base image), and the contents of every file the
# Dockerfile COPYs from the build context (tracked or untracked, not git-ignored). build-image.sh
# labels the image with it, so test/deploy/publish.sh can tell whether localhost/vigil:test was
# built from the current tree and skip the rebuild.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
# Sources of each `COPY` without --from: every argument but the last, flags dropped.
mapfile -t sources < <(sed -e ':a' -e '/\\$/N; s/\\\n//; ta' Dockerfile \
  | awk 'toupper($1) == "COPY" { from = 0; for (i = 2; i < NF; i++) { if ($i ~ /^--from=/) from = 1 } ;
      if (!from) for (i = 2; i < NF; i++) if ($i !~ /^--/) print $i }' | sort -u)
((${#sources[@]})) || { echo "context-hash.sh: no COPY sources found in Dockerfile" >&2; exit 1; }
{
  printf '%s\n' Dockerfile .dockerignore test/deploy/build-image.sh
  git ls-files -co --exclude-standard -- "${sources[@]}"
} | LC_ALL=C sort -u | while IFS= read -r f; do
  # A file deleted from the work tree but still in the index is gone from the build context too.
  if [[ -f "$f" ]]; then printf '%s %s\n' "$(sha256sum < "$f" | cut -d' ' -f1)" "$f"; fi
done | sha256sum | cut -d' ' -f1

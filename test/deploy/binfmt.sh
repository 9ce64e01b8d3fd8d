#!/usr/bin/env bash
# Lets this amd64 machine run arm64 programs through qemu's user mode, and puts the host back as it
# was afterwards (test/deploy/arm64.test.ts, test/deploy/build-image.sh arm64).
#
#   test/deploy/binfmt.sh enable STATEFILE    mounts binfmt_misc if needed and registers qemu-aarch64
#                                             (Debian's qemu-user-static line, flags OPF: F opens the
#                                             interpreter now, so chroots and podman's RUN steps use it);
#                                             writes what it changed to STATEFILE
#   test/deploy/binfmt.sh restore STATEFILE   undoes exactly that: removes the entry it registered,
#                                             unmounts binfmt_misc if it mounted it
#   test/deploy/binfmt.sh state               prints the state to compare: mounted or not, and each entry
#
# Root only. An entry or mount that was there before is left alone.
set -euo pipefail
DIR=/proc/sys/fs/binfmt_misc
CONF=/usr/lib/binfmt.d/qemu-aarch64.conf

die() { printf '[binfmt] ERROR: %s\n' "$*" >&2; exit 1; }
mounted() { grep -qs " $DIR binfmt_misc " /proc/mounts; }

state() {
  if mounted; then
    echo "mounted"
    for f in "$DIR"/*; do
      case "${f##*/}" in register | status) continue ;; esac
      [[ -e "$f" ]] && printf '%s %s\n' "${f##*/}" "$(head -1 "$f")"
    done
    printf 'status %s\n' "$(cat "$DIR/status")"
  else
    echo "not mounted"
  fi
}

case "${1:-}" in
  enable)
    state_file="${2:?usage: binfmt.sh enable STATEFILE}"
    [[ $EUID -eq 0 ]] || die "needs root"
    [[ -s "$CONF" ]] || die "$CONF missing: install qemu-user-static"
    : >"$state_file"
    if ! mounted; then
      mount -t binfmt_misc binfmt_misc "$DIR"
      echo "mounted-by-us" >>"$state_file"
    fi
    if [[ ! -e "$DIR/qemu-aarch64" ]]; then
      cat "$CONF" >"$DIR/register"
      echo "registered-by-us qemu-aarch64" >>"$state_file"
    fi
    [[ "$(head -1 "$DIR/qemu-aarch64")" == enabled ]] || die "qemu-aarch64 is registered but disabled"
    ;;
  restore)
    state_file="${2:?usage: binfmt.sh restore STATEFILE}"
    [[ -f "$state_file" ]] || exit 0
    if grep -q '^registered-by-us qemu-aarch64$' "$state_file" && [[ -e "$DIR/qemu-aarch64" ]]; then
      echo -1 >"$DIR/qemu-aarch64"
    fi
    if grep -q '^mounted-by-us$' "$state_file" && mounted; then umount "$DIR"; fi
    rm -f "$state_file"
    ;;
  state) state ;;
  *) die "usage: binfmt.sh enable STATEFILE | restore STATEFILE | state" ;;
esac

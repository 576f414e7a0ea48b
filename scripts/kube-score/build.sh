#!/usr/bin/env bash
# Builds kube-score (static checks of Kubernetes manifests) from the Go module proxy, once per
# version.
#
#   scripts/kube-score/build.sh [version]     e.g. v1.20.0 (default: $SWITCHYARD_KUBE_SCORE_VERSION
#                                             or the pinned version below; "latest" asks the module
#                                             proxy for the newest v1.x tag)
#
# Prints progress on stderr and, as the last line on stdout, the path of the binary:
# $HOME/.cache/switchyard/kube-score/<version>/kube-score. When SWITCHYARD_KUBE_SCORE is set to an
# executable, builds nothing and prints it.
#
# Idempotent and safe to run concurrently: a flock on <cache>/<version>.lock serialises builds;
# the binary is moved into place only once it is complete, next to a stamp (kube-score.stamp)
# naming the version and the Go release that built it.
#
# The version is set the way kube-score's releases set it (goreleaser: -X main.version=<tag
# without the v>); the commit and build date stay "N/A", the module proxy does not know them.
set -euo pipefail

KUBE_SCORE_VERSION="${1:-${SWITCHYARD_KUBE_SCORE_VERSION:-v1.20.0}}"

log() { printf '[kube-score-build] %s\n' "$*" >&2; }
die() {
  log "error: $*"
  exit 1
}

if [[ -n "${SWITCHYARD_KUBE_SCORE:-}" ]]; then
  [[ -x "$SWITCHYARD_KUBE_SCORE" ]] || die "SWITCHYARD_KUBE_SCORE=$SWITCHYARD_KUBE_SCORE is not executable"
  printf '%s\n' "$SWITCHYARD_KUBE_SCORE"
  exit 0
fi

command -v go >/dev/null || die "Go is needed to build kube-score (or set SWITCHYARD_KUBE_SCORE)"
command -v flock >/dev/null || die "flock (util-linux) is needed"

# Use the Go that is installed; never fetch another toolchain. Module mode regardless of the
# caller's environment.
export GOTOOLCHAIN=local GOFLAGS=-mod=mod GO111MODULE=on CGO_ENABLED=0

if [[ "$KUBE_SCORE_VERSION" == latest ]]; then
  KUBE_SCORE_VERSION="$(go list -m -versions github.com/zegl/kube-score | tr ' ' '\n' | grep -E '^v1\.[0-9]+\.[0-9]+$' | sort -V | tail -n1)"
  [[ -n "$KUBE_SCORE_VERSION" ]] || die "could not list github.com/zegl/kube-score versions on the module proxy"
  log "latest kube-score v1 on the module proxy: $KUBE_SCORE_VERSION"
fi
[[ "$KUBE_SCORE_VERSION" =~ ^v1\.[0-9]+\.[0-9]+$ ]] || die "kube-score version must look like v1.20.0, got '$KUBE_SCORE_VERSION'"

CACHE_ROOT="${SWITCHYARD_CACHE_DIR:-$HOME/.cache/switchyard}/kube-score"
OUT="$CACHE_ROOT/$KUBE_SCORE_VERSION"
BIN="$OUT/kube-score"
STAMP="kube-score $KUBE_SCORE_VERSION $(go env GOVERSION)"
mkdir -p "$OUT"

is_built() { [[ -x "$BIN" && -f "$BIN.stamp" && "$(cat "$BIN.stamp")" == "$STAMP" ]]; }

if is_built; then
  printf '%s\n' "$BIN"
  exit 0
fi

exec 9>"$CACHE_ROOT/$KUBE_SCORE_VERSION.lock"
if ! flock -n 9; then
  log "another build of $KUBE_SCORE_VERSION is running; waiting for it ($CACHE_ROOT/$KUBE_SCORE_VERSION.lock)"
  flock 9
fi
# The build we waited for may have finished it.
if is_built; then
  printf '%s\n' "$BIN"
  exit 0
fi

# Work dirs of builds that were killed (we hold the lock, so no build is using them).
rm -rf "$OUT"/build.*
WORK="$(mktemp -d "$OUT/build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

start=$(date +%s)
log "kube-score $KUBE_SCORE_VERSION: go install (a minute or two on a cold module and build cache)"
GOBIN="$WORK" go install -trimpath \
  -ldflags "-s -w -X main.version=${KUBE_SCORE_VERSION#v}" \
  "github.com/zegl/kube-score/cmd/kube-score@$KUBE_SCORE_VERSION" >&2
"$WORK/kube-score" version >&2
mv -f "$WORK/kube-score" "$BIN"
printf '%s' "$STAMP" >"$BIN.stamp"
log "kube-score $KUBE_SCORE_VERSION: built in $(($(date +%s) - start)) s, $(du -h "$BIN" | cut -f1)"
printf '%s\n' "$BIN"

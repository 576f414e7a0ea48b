#!/usr/bin/env bash
# Builds helm v3 from the Go module proxy, once per version, for test/chart/.
#
#   scripts/helm/build.sh [version]     e.g. v3.22.0 (default: $SWITCHYARD_HELM_VERSION or the
#                                       pinned version below; "latest" asks the module proxy for
#                                       the newest v3.x tag)
#
# Prints progress on stderr and, as the last line on stdout, the path of the binary:
# $HOME/.cache/switchyard/helm/<version>/helm. When SWITCHYARD_HELM is set to an executable,
# builds nothing and prints it.
#
# Idempotent and safe to run concurrently: a flock on <cache>/<version>.lock serialises builds;
# the binary is moved into place only once it is complete.
set -euo pipefail

HELM_VERSION="${1:-${SWITCHYARD_HELM_VERSION:-v3.22.0}}"

log() { printf '[helm-build] %s\n' "$*" >&2; }
die() {
  log "error: $*"
  exit 1
}

if [[ -n "${SWITCHYARD_HELM:-}" ]]; then
  [[ -x "$SWITCHYARD_HELM" ]] || die "SWITCHYARD_HELM=$SWITCHYARD_HELM is not executable"
  printf '%s\n' "$SWITCHYARD_HELM"
  exit 0
fi

command -v go >/dev/null || die "Go is needed to build helm (or set SWITCHYARD_HELM)"
command -v flock >/dev/null || die "flock (util-linux) is needed"

# Use the Go that is installed; never fetch another toolchain. Module mode regardless of the
# caller's environment.
export GOTOOLCHAIN=local GOFLAGS=-mod=mod GO111MODULE=on CGO_ENABLED=0

if [[ "$HELM_VERSION" == latest ]]; then
  HELM_VERSION="$(go list -m -versions helm.sh/helm/v3 | tr ' ' '\n' | grep -E '^v3\.[0-9]+\.[0-9]+$' | sort -V | tail -n1)"
  [[ -n "$HELM_VERSION" ]] || die "could not list helm.sh/helm/v3 versions on the module proxy"
  log "latest helm v3 on the module proxy: $HELM_VERSION"
fi
[[ "$HELM_VERSION" =~ ^v3\.[0-9]+\.[0-9]+$ ]] || die "helm version must look like v3.22.0, got '$HELM_VERSION'"

CACHE_ROOT="${SWITCHYARD_CACHE_DIR:-$HOME/.cache/switchyard}/helm"
OUT="$CACHE_ROOT/$HELM_VERSION"
BIN="$OUT/helm"
mkdir -p "$OUT"

if [[ -x "$BIN" ]]; then
  printf '%s\n' "$BIN"
  exit 0
fi

exec 9>"$CACHE_ROOT/$HELM_VERSION.lock"
if ! flock -n 9; then
  log "another build of $HELM_VERSION is running; waiting for it ($CACHE_ROOT/$HELM_VERSION.lock)"
  flock 9
fi
# The build we waited for may have finished it.
if [[ -x "$BIN" ]]; then
  printf '%s\n' "$BIN"
  exit 0
fi

# Work dirs of builds that were killed (we hold the lock, so no build is using them).
rm -rf "$OUT"/build.*
WORK="$(mktemp -d "$OUT/build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

start=$(date +%s)
log "helm $HELM_VERSION: go install (several minutes on a cold module and build cache)"
GOBIN="$WORK" go install -trimpath \
  -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
  "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
"$WORK/helm" version --short >&2
mv -f "$WORK/helm" "$BIN"
log "helm $HELM_VERSION: built in $(($(date +%s) - start)) s, $(du -h "$BIN" | cut -f1)"
printf '%s\n' "$BIN"

#!/usr/bin/env bash
# Builds a GAIE endpoint picker and switchyard's ext_proc stand-in for Envoy, once per version, for
# the `gaie-epp` and `gaie-lwepp` peers of `switchyard bench` (bench/routing/gaie.ts) and
# test/gaie/gaie-epp.test.ts.
#
#   scripts/gaie/build-epp.sh [epp|lwepp] [gaie-version]
#       epp    GAIE's full endpoint picker, cmd/epp (default), pinned to v1.5.0
#       lwepp  GAIE's lightweight reference picker, cmd/lwepp, pinned to v1.6.2
#
# Prints progress on stderr and, as the last line on stdout, the folder that holds the two
# binaries: $HOME/.cache/switchyard/gaie/<version>/epp/{<picker>,extproc-proxy}.
#
# Why two versions: v1.5.0 is the last release of sigs.k8s.io/gateway-api-inference-extension
# that ships the full EPP (cmd/epp: the default scheduling profile of queue, KV-cache and
# prefix-cache scorers over the vLLM metrics it scrapes from each pod). From v1.6 on the full EPP
# lives in another project (llm-d) and the module keeps only cmd/lwepp (round-robin over the
# pool's ready pods). Both speak the same ext_proc protocol and read the same InferencePool v1.
#
# The stand-in (bench/routing/extproc-proxy/main.go, switchyard's own code) does what Envoy does
# in front of an EPP; it is built in the same throw-away module as the picker because it uses the
# ext_proc types of go-control-plane that the GAIE module already requires, at the same version.
#
# Idempotent and safe to run concurrently: a flock on <cache>/<version>.lock serialises builds;
# a binary is moved into place only once complete, next to a stamp naming what it is (the
# stand-in's stamp includes its source's hash, so an edit rebuilds it).
set -euo pipefail

PICKER="${1:-epp}"
case "$PICKER" in
  epp) GAIE_VERSION="${2:-${SWITCHYARD_GAIE_EPP_VERSION:-v1.5.0}}" ;;
  lwepp) GAIE_VERSION="${2:-${SWITCHYARD_GAIE_LWEPP_VERSION:-v1.6.2}}" ;;
  *)
    echo "gaie-build: the picker must be epp or lwepp, got '$PICKER'" >&2
    exit 2
    ;;
esac
GAIE_MODULE=sigs.k8s.io/gateway-api-inference-extension

LOG_TAG=gaie-build
# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
PROXY_SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/bench/routing/extproc-proxy/main.go"

[[ "$GAIE_VERSION" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "GAIE version must look like v1.6.2, got '$GAIE_VERSION'"
command -v go >/dev/null || die "Go is needed to build GAIE's endpoint picker"
command -v flock >/dev/null || die "flock (util-linux) is needed"
[[ -f "$PROXY_SRC" ]] || die "the ext_proc stand-in's source is missing: $PROXY_SRC"

CACHE_ROOT="${SWITCHYARD_CACHE_DIR:-$HOME/.cache/switchyard}/gaie"
OUT="$CACHE_ROOT/$GAIE_VERSION/epp"
mkdir -p "$OUT"

# Use the Go that is installed; never fetch another toolchain. Module mode regardless of the
# caller's environment.
export GOTOOLCHAIN=local GOFLAGS=-mod=mod GO111MODULE=on CGO_ENABLED=0

PICKER_STAMP="$PICKER $GAIE_VERSION $(go env GOVERSION)"
PROXY_STAMP="extproc-proxy $GAIE_VERSION $(go env GOVERSION) $(sha256sum "$PROXY_SRC" | cut -c1-16)"
is_built() { [[ -x "$OUT/$1" && -f "$OUT/$1.stamp" && "$(cat "$OUT/$1.stamp")" == "$2" ]]; }

if is_built "$PICKER" "$PICKER_STAMP" && is_built extproc-proxy "$PROXY_STAMP"; then
  printf '%s\n' "$OUT"
  exit 0
fi

exec 9>"$CACHE_ROOT/$GAIE_VERSION.lock"
if ! flock -n 9; then
  log "another build of $GAIE_VERSION is running; waiting for it ($CACHE_ROOT/$GAIE_VERSION.lock)"
  flock 9
fi

# Work dirs of builds that were killed (we hold the lock, so no build is using them).
rm -rf "$OUT"/build.*
WORK="$(mktemp -d "$OUT/build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
seconds() { date +%s; }

# A throw-away module that requires the GAIE module: the picker is built from there (so go.sum and the
# dependency versions are GAIE's own), and the stand-in is a package of it.
start=$(seconds)
{
  echo "module switchyard.local/gaie-build"
  echo
  echo "go $(go env GOVERSION | sed 's/^go//')"
  echo
  echo "require $GAIE_MODULE $GAIE_VERSION"
} >"$WORK/go.mod"
mkdir -p "$WORK/extproc-proxy"
cp "$PROXY_SRC" "$WORK/extproc-proxy/main.go"
printf '//go:build tools\n\npackage tools\n\nimport _ "%s/cmd/%s"\n' "$GAIE_MODULE" "$PICKER" >"$WORK/tools.go"
log "gaie $GAIE_VERSION: go mod tidy (downloads modules on a cold module cache)"
(cd "$WORK" && go mod tidy) >&2

if ! is_built "$PICKER" "$PICKER_STAMP"; then
  [[ -d "$(go env GOMODCACHE)/$GAIE_MODULE@$GAIE_VERSION/cmd/$PICKER" ]] ||
    die "GAIE $GAIE_VERSION has no cmd/$PICKER (epp: v1.5.0 and earlier; lwepp: v1.6 and later)"
  log "gaie $GAIE_VERSION: go build cmd/$PICKER (minutes on a cold build cache)"
  (cd "$WORK" && go build -trimpath -ldflags "-s -w" -o "$WORK/$PICKER.bin" "$GAIE_MODULE/cmd/$PICKER") >&2
  mv -f "$WORK/$PICKER.bin" "$OUT/$PICKER"
  printf '%s' "$PICKER_STAMP" >"$OUT/$PICKER.stamp"
fi
if ! is_built extproc-proxy "$PROXY_STAMP"; then
  log "gaie $GAIE_VERSION: go build the ext_proc stand-in"
  (cd "$WORK" && go build -trimpath -ldflags "-s -w" -o "$WORK/extproc-proxy.bin" ./extproc-proxy) >&2
  mv -f "$WORK/extproc-proxy.bin" "$OUT/extproc-proxy"
  printf '%s' "$PROXY_STAMP" >"$OUT/extproc-proxy.stamp"
fi
log "gaie $GAIE_VERSION: built in $(($(seconds) - start)) s"
printf '%s\n' "$OUT"

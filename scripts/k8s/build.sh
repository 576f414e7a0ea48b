#!/usr/bin/env bash
# Builds kube-apiserver, kubectl and etcd from the Go module proxy, once per version, for
# test/k8s/.
#
#   scripts/k8s/build.sh [kubernetes-version]     e.g. v1.37.2 (default: $SWITCHYARD_K8S_VERSION
#                                                  or the pinned version below)
#
# Prints progress on stderr and, as the last line on stdout, the folder that holds the three
# binaries: $HOME/.cache/switchyard/k8s/<kubernetes-version>/{kube-apiserver,kubectl,etcd}.
# With SWITCHYARD_K8S_NODE=1 it also builds kubelet, kube-scheduler, kube-controller-manager and
# kube-proxy into the same folder (a real node for test/node/: scripts/node/build.sh asks).
# When KUBEBUILDER_ASSETS is set, builds nothing and prints that folder (it must hold all three,
# as envtest's assets do).
#
# Idempotent and safe to run concurrently: a flock on <cache>/<version>.lock serialises builds;
# a binary is moved into place only once it is complete, next to a stamp (<binary>.stamp) naming
# what it is. Each binary has its own stamp, so only the missing or outdated ones are built (a
# cache that holds kube-apiserver and etcd builds just kubectl).
#
# Why not `go install k8s.io/kubernetes/cmd/kube-apiserver@vX`: k8s.io/kubernetes requires its
# staging modules (k8s.io/api, k8s.io/apiserver, ...) at v0.0.0 and points them at ./staging with
# replace directives, which `go install` ignores. So we make a throw-away module that requires
# k8s.io/kubernetes and replaces every staging module with its published v0.<minor>.<patch>
# version; the list of staging modules is read from k8s.io/kubernetes's own go.mod. kube-apiserver
# and kubectl are both built from that one module (prepared once per run). etcd's server module
# has replace directives too, so it is built from a throw-away module as well.
set -euo pipefail

K8S_VERSION="${1:-${SWITCHYARD_K8S_VERSION:-v1.37.2}}"
ETCD_VERSION="${SWITCHYARD_ETCD_VERSION:-v3.6.16}"

LOG_TAG=k8s-build
# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"

if [[ -n "${KUBEBUILDER_ASSETS:-}" ]]; then
  for b in kube-apiserver kubectl etcd; do
    [[ -x "$KUBEBUILDER_ASSETS/$b" ]] ||
      die "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS has no executable $b (it must hold kube-apiserver, kubectl and etcd)"
  done
  log "using KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS"
  printf '%s\n' "$KUBEBUILDER_ASSETS"
  exit 0
fi

[[ "$K8S_VERSION" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || die "kubernetes version must look like v1.34.4, got '$K8S_VERSION'"
K8S_MINOR="${BASH_REMATCH[1]}"
K8S_PATCH="${BASH_REMATCH[2]}"
[[ "$ETCD_VERSION" =~ ^v3\.[0-9]+\.[0-9]+$ ]] || die "etcd version must look like v3.6.16, got '$ETCD_VERSION'"
command -v go >/dev/null || die "Go is needed to build kube-apiserver, kubectl and etcd (or set KUBEBUILDER_ASSETS)"
command -v flock >/dev/null || die "flock (util-linux) is needed"

CACHE_ROOT="${SWITCHYARD_CACHE_DIR:-$HOME/.cache/switchyard}/k8s"
OUT="$CACHE_ROOT/$K8S_VERSION"
mkdir -p "$OUT"

# Use the Go that is installed; never fetch another toolchain. Module mode regardless of the
# caller's environment.
export GOTOOLCHAIN=local GOFLAGS=-mod=mod GO111MODULE=on CGO_ENABLED=0

APISERVER_STAMP="kube-apiserver $K8S_VERSION $(go env GOVERSION)"
KUBECTL_STAMP="kubectl $K8S_VERSION $(go env GOVERSION)"
ETCD_STAMP="etcd $ETCD_VERSION $(go env GOVERSION)"
NODE_BINARIES=()
[[ "${SWITCHYARD_K8S_NODE:-0}" != 1 ]] || NODE_BINARIES=(kubelet kube-scheduler kube-controller-manager kube-proxy)
node_stamp() { printf '%s %s %s' "$1" "$K8S_VERSION" "$(go env GOVERSION)"; }
is_built() { [[ -x "$OUT/$1" && -f "$OUT/$1.stamp" && "$(cat "$OUT/$1.stamp")" == "$2" ]]; }
node_built() {
  local b
  for b in "${NODE_BINARIES[@]}"; do is_built "$b" "$(node_stamp "$b")" || return 1; done
}

if is_built kube-apiserver "$APISERVER_STAMP" && is_built kubectl "$KUBECTL_STAMP" &&
  is_built etcd "$ETCD_STAMP" && node_built; then
  printf '%s\n' "$OUT"
  exit 0
fi

exec 9>"$CACHE_ROOT/$K8S_VERSION.lock"
if ! flock -n 9; then
  log "another build of $K8S_VERSION is running; waiting for it ($CACHE_ROOT/$K8S_VERSION.lock)"
  flock 9
fi

# Work dirs of builds that were killed (we hold the lock, so no build is using them).
rm -rf "$OUT"/build.*
WORK="$(mktemp -d "$OUT/build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

seconds() { date +%s; }

# go.mod lines of k8s.io/kubernetes that must be copied: the godebug line or block.
copy_godebug() {
  awk '
    /^godebug[ \t]*\(/ { inblock = 1; print; next }
    inblock { print; if ($0 ~ /^\)/) inblock = 0; next }
    /^godebug[ \t]/ { print }
  ' "$1"
}

# The throw-away module that requires k8s.io/kubernetes, shared by kube-apiserver and kubectl:
# prepared on first use, then reused. Sets K8S_MODULE (its folder) and K8S_LDFLAGS.
K8S_MODULE=""
K8S_LDFLAGS=""
prepare_k8s_module() {
  [[ -z "$K8S_MODULE" ]] || return 0
  local start dir gomod staging ldflags v
  start=$(seconds)
  dir="$WORK/kubernetes"
  mkdir -p "$dir"
  log "kubernetes $K8S_VERSION: resolving k8s.io/kubernetes's go.mod"
  gomod="$(cd "$dir" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
  [[ -f "$gomod" ]] || die "could not download k8s.io/kubernetes@$K8S_VERSION's go.mod"
  staging="$(sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\)[[:space:]]*=>[[:space:]]*\./staging/src/.*#\1#p' "$gomod")"
  [[ -n "$staging" ]] || die "no ./staging replace directives found in $gomod"
  log "kubernetes $K8S_VERSION: $(wc -w <<<"$staging") staging modules, replaced by v0.$K8S_MINOR.$K8S_PATCH"
  {
    echo "module switchyard.local/kubernetes-build"
    echo
    grep -E '^go [0-9]' "$gomod"
    echo
    copy_godebug "$gomod"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    echo "replace ("
    for m in $staging; do
      echo "	$m => $m v0.$K8S_MINOR.$K8S_PATCH"
    done
    echo ")"
  } >"$dir/go.mod"
  {
    printf '//go:build tools\n\npackage tools\n\nimport (\n'
    for m in kube-apiserver kubectl "${NODE_BINARIES[@]}"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$m"; done
    printf ')\n'
  } >"$dir/tools.go"
  log "kubernetes $K8S_VERSION: go mod tidy (downloads modules on a cold module cache)"
  (cd "$dir" && go mod tidy) >&2
  ldflags="-s -w"
  for v in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $v.gitVersion=$K8S_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$K8S_MINOR"
    ldflags+=" -X $v.gitTreeState=clean -X $v.buildDate=1970-01-01T00:00:00Z"
  done
  K8S_LDFLAGS="$ldflags"
  K8S_MODULE="$dir"
  log "kubernetes $K8S_VERSION: module ready in $(($(seconds) - start)) s"
}

# build_k8s <binary> <stamp> <version command...>: builds k8s.io/kubernetes/cmd/<binary> from the
# shared module, runs the version command on it, then moves it and its stamp into place.
build_k8s() {
  local name="$1" stamp="$2" start
  shift 2
  prepare_k8s_module
  start=$(seconds)
  log "$name $K8S_VERSION: go build (several minutes on a cold build cache)"
  (cd "$K8S_MODULE" && go build -trimpath -ldflags "$K8S_LDFLAGS" -o "$K8S_MODULE/$name.bin" "k8s.io/kubernetes/cmd/$name") >&2
  "$K8S_MODULE/$name.bin" "$@" >&2
  mv -f "$K8S_MODULE/$name.bin" "$OUT/$name"
  printf '%s' "$stamp" >"$OUT/$name.stamp"
  log "$name $K8S_VERSION: built in $(($(seconds) - start)) s, $(du -h "$OUT/$name" | cut -f1)"
}

build_etcd() {
  local start dir
  start=$(seconds)
  dir="$WORK/etcd"
  mkdir -p "$dir"
  {
    echo "module switchyard.local/etcd-build"
    echo
    echo "go $(go env GOVERSION | sed 's/^go//')"
    echo
    echo "require go.etcd.io/etcd/server/v3 $ETCD_VERSION"
  } >"$dir/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' >"$dir/tools.go"
  log "etcd $ETCD_VERSION: go mod tidy"
  (cd "$dir" && go mod tidy) >&2
  log "etcd $ETCD_VERSION: go build"
  (cd "$dir" && go build -trimpath -ldflags "-s -w" -o "$dir/etcd.bin" go.etcd.io/etcd/server/v3) >&2
  "$dir/etcd.bin" --version >&2
  mv -f "$dir/etcd.bin" "$OUT/etcd"
  printf '%s' "$ETCD_STAMP" >"$OUT/etcd.stamp"
  log "etcd $ETCD_VERSION: built in $(($(seconds) - start)) s, $(du -h "$OUT/etcd" | cut -f1)"
}

is_built etcd "$ETCD_STAMP" || build_etcd
is_built kube-apiserver "$APISERVER_STAMP" || build_k8s kube-apiserver "$APISERVER_STAMP" --version
is_built kubectl "$KUBECTL_STAMP" || build_k8s kubectl "$KUBECTL_STAMP" version --client
for b in "${NODE_BINARIES[@]}"; do
  is_built "$b" "$(node_stamp "$b")" || build_k8s "$b" "$(node_stamp "$b")" --version
done
printf '%s\n' "$OUT"

#!/usr/bin/env bash
# Everything a real Kubernetes node needs on this machine, for test/node/ (docs/node.md):
#
#   - kubelet, kube-proxy, kube-scheduler and kube-controller-manager, built from the Go module
#     proxy like kube-apiserver (scripts/k8s/build.sh with SWITCHYARD_K8S_NODE=1), cached;
#   - Debian's containerd (1.6), runc, the CNI plugins (bridge, host-local, loopback) and
#     iptables, installed with apt-get when missing;
#   - the pause image containerd starts every pod sandbox from: no registry is reachable, so a
#     static C `pause` (scripts/node/pause.c) under the name containerd's sandbox_image names,
#     saved as a docker-archive for `ctr images import`, cached.
#
#   scripts/node/build.sh    prints, as its last line on stdout, a JSON object:
#                            {"k8s": <folder of the binaries>, "pauseArchive": <tar>,
#                             "pauseImage": <name>, "cniBinDir": <folder>}
#
# Progress goes to stderr ("[node-build] ..."). Needs root. Serialised by a flock.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="${SWITCHYARD_CACHE_DIR:-$HOME/.cache/switchyard}/node"
PAUSE_IMAGE=registry.k8s.io/pause:3.10
CNI_BIN_DIR=/usr/lib/cni

LOG_TAG=node-build
# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
[[ $EUID -eq 0 ]] || die "a node needs root (containerd, kubelet, network namespaces)"

need=()
command -v containerd >/dev/null || need+=(containerd)
command -v runc >/dev/null || need+=(runc)
[[ -x "$CNI_BIN_DIR/bridge" && -x "$CNI_BIN_DIR/host-local" ]] || need+=(containernetworking-plugins)
command -v iptables-restore >/dev/null || need+=(iptables)
command -v nsenter >/dev/null || need+=(util-linux)
command -v gcc >/dev/null || need+=(gcc libc6-dev)
command -v podman >/dev/null || need+=(podman)
((${#need[@]} == 0)) || install_packages "${need[@]}"

K8S_DIR="$(SWITCHYARD_K8S_NODE=1 bash "$ROOT/scripts/k8s/build.sh" | tail -n1)"

mkdir -p "$CACHE"
exec 9>"$CACHE/build.lock"
flock 9
PAUSE_ARCHIVE="$CACHE/pause-3.10.tar"
PAUSE_STAMP="$PAUSE_IMAGE $(sha256sum "$ROOT/scripts/node/pause.c" | cut -c1-16)"
if [[ ! -f "$PAUSE_ARCHIVE" || "$(cat "$PAUSE_ARCHIVE.stamp" 2>/dev/null)" != "$PAUSE_STAMP" ]]; then
  log "pause image: gcc -static scripts/node/pause.c, podman build, podman save"
  work="$(mktemp -d "$CACHE/pause.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  gcc -static -Os -o "$work/pause" "$ROOT/scripts/node/pause.c"
  strip "$work/pause"
  printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' >"$work/Containerfile"
  podman --runtime runc --cgroup-manager cgroupfs build --pull=never -q -t "$PAUSE_IMAGE" \
    -f "$work/Containerfile" "$work" >&2
  rm -f "$work/pause.tar"
  podman save --format docker-archive -o "$work/pause.tar" "$PAUSE_IMAGE" >&2
  mv -f "$work/pause.tar" "$PAUSE_ARCHIVE"
  printf '%s' "$PAUSE_STAMP" >"$PAUSE_ARCHIVE.stamp"
  rm -rf "$work"
  trap - EXIT
fi

printf '{"k8s":"%s","pauseArchive":"%s","pauseImage":"%s","cniBinDir":"%s"}\n' \
  "$K8S_DIR" "$PAUSE_ARCHIVE" "$PAUSE_IMAGE" "$CNI_BIN_DIR"

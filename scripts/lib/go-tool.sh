# Sourced by scripts/helm/build.sh and scripts/kube-score/build.sh: `go install` one command-line
# tool from the Go module proxy, once per version, into $HOME/.cache/switchyard/<name>/<version>/.
#
#   go_tool_build NAME MODULE PACKAGE VERSION LDFLAGS VERSION_ARGS...
#
#     NAME          binary and cache folder, e.g. helm
#     MODULE        module path, for "latest", e.g. helm.sh/helm/v3
#     PACKAGE       what go install builds, e.g. helm.sh/helm/v3/cmd/helm
#     VERSION       a tag like v3.22.0, or "latest": the newest tag of major version
#                   $GO_TOOL_MAJOR (e.g. v3) on the module proxy
#     LDFLAGS       extra -ldflags (the version stamp the tool's releases set); @VERSION@ and
#                   @VERSION_NO_V@ stand for the resolved version ("latest" is resolved first)
#     VERSION_ARGS  how to make the built binary print its version (a check that it runs)
#
# Prints progress on stderr ("[NAME-build] ...") and, as the last line on stdout, the binary's
# path. Idempotent and safe to run concurrently: a flock on <cache>/<version>.lock serialises
# builds; the binary is moved into place only once complete, beside a stamp naming the version
# and the Go release that built it (a Go upgrade rebuilds).

go_tool_log() { printf '[%s-build] %s\n' "$GO_TOOL_NAME" "$*" >&2; }
go_tool_die() {
  go_tool_log "error: $*"
  exit 1
}

go_tool_build() {
  GO_TOOL_NAME="$1"
  local module="$2" package="$3" version="$4" ldflags="$5"
  shift 5
  local major="${GO_TOOL_MAJOR:?set GO_TOOL_MAJOR, e.g. v3}"

  command -v go >/dev/null || go_tool_die "Go is needed to build $GO_TOOL_NAME"
  command -v flock >/dev/null || go_tool_die "flock (util-linux) is needed"
  # Use the Go that is installed; never fetch another toolchain. Module mode regardless of the
  # caller's environment.
  export GOTOOLCHAIN=local GOFLAGS=-mod=mod GO111MODULE=on CGO_ENABLED=0

  if [[ "$version" == latest ]]; then
    version="$(go list -m -versions "$module" | tr ' ' '\n' | grep -E "^${major}\.[0-9]+\.[0-9]+\$" | sort -V | tail -n1)"
    [[ -n "$version" ]] || go_tool_die "could not list $module versions on the module proxy"
    go_tool_log "latest $GO_TOOL_NAME $major on the module proxy: $version"
  fi
  [[ "$version" =~ ^${major}\.[0-9]+\.[0-9]+$ ]] ||
    go_tool_die "$GO_TOOL_NAME version must look like ${major}.1.0, got '$version'"

  ldflags="${ldflags//@VERSION@/$version}"
  ldflags="${ldflags//@VERSION_NO_V@/${version#v}}"

  local root="${SWITCHYARD_CACHE_DIR:-$HOME/.cache/switchyard}/$GO_TOOL_NAME"
  local out="$root/$version"
  local bin="$out/$GO_TOOL_NAME"
  local stamp
  stamp="$GO_TOOL_NAME $version $(go env GOVERSION)"
  mkdir -p "$out"
  go_tool_is_built() { [[ -x "$bin" && -f "$bin.stamp" && "$(cat "$bin.stamp")" == "$stamp" ]]; }
  if go_tool_is_built; then
    printf '%s\n' "$bin"
    return 0
  fi

  exec 9>"$root/$version.lock"
  if ! flock -n 9; then
    go_tool_log "another build of $version is running; waiting for it ($root/$version.lock)"
    flock 9
  fi
  # The build we waited for may have finished it.
  if go_tool_is_built; then
    printf '%s\n' "$bin"
    return 0
  fi
  # Work dirs of builds that were killed (we hold the lock, so no build is using them).
  rm -rf "$out"/build.*
  GO_TOOL_WORK="$(mktemp -d "$out/build.XXXXXX")"
  trap 'rm -rf "$GO_TOOL_WORK"' EXIT

  local start
  start=$(date +%s)
  go_tool_log "$GO_TOOL_NAME $version: go install (a minute or more on a cold module and build cache)"
  GOBIN="$GO_TOOL_WORK" go install -trimpath -ldflags "-s -w $ldflags" "$package@$version" >&2
  "$GO_TOOL_WORK/$GO_TOOL_NAME" "$@" >&2
  mv -f "$GO_TOOL_WORK/$GO_TOOL_NAME" "$bin"
  printf '%s' "$stamp" >"$bin.stamp"
  go_tool_log "$GO_TOOL_NAME $version: built in $(($(date +%s) - start)) s, $(du -h "$bin" | cut -f1)"
  printf '%s\n' "$bin"
}

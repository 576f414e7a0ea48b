# Sourced by the build and install scripts under scripts/: their log lines, their error exit, and
# apt-get for what a machine lacks. Set LOG_TAG before sourcing (e.g. LOG_TAG=image-build): every
# line on stderr then reads "[image-build] ...", so a CI log says which script spoke.

log() { printf '[%s] %s\n' "${LOG_TAG:?set LOG_TAG before sourcing scripts/lib/common.sh}" "$*" >&2; }
die() {
  log "error: $*"
  exit 1
}

# apt-get install, with one `apt-get update` first if the package lists are missing or stale.
install_packages() {
  log "installing $* with apt-get (once)"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q "$@" >&2; then
    apt-get update -q >&2
    apt-get install -y -q "$@" >&2
  fi
}

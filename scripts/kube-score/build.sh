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
# How the build is cached and locked: scripts/lib/go-tool.sh.
#
# The version is set the way kube-score's releases set it (goreleaser: -X main.version=<tag
# without the v>); the commit and build date stay "N/A", the module proxy does not know them.
set -euo pipefail
source "$(dirname "$0")/../lib/go-tool.sh"

KUBE_SCORE_VERSION="${1:-${SWITCHYARD_KUBE_SCORE_VERSION:-v1.20.0}}"

if [[ -n "${SWITCHYARD_KUBE_SCORE:-}" ]]; then
  GO_TOOL_NAME=kube-score
  [[ -x "$SWITCHYARD_KUBE_SCORE" ]] || go_tool_die "SWITCHYARD_KUBE_SCORE=$SWITCHYARD_KUBE_SCORE is not executable"
  printf '%s\n' "$SWITCHYARD_KUBE_SCORE"
  exit 0
fi

GO_TOOL_MAJOR=v1 go_tool_build kube-score github.com/zegl/kube-score \
  github.com/zegl/kube-score/cmd/kube-score "$KUBE_SCORE_VERSION" \
  "-X main.version=@VERSION_NO_V@" version

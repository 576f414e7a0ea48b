#!/usr/bin/env bash
# Builds helm v3 from the Go module proxy, once per version, for test/chart/.
#
#   scripts/helm/build.sh [version]     e.g. v3.22.0 (default: $SWITCHYARD_HELM_VERSION or the
#                                       pinned version below; "latest" asks the module proxy for
#                                       the newest v3.x tag)
#
# Prints progress on stderr and, as the last line on stdout, the path of the binary:
# $HOME/.cache/switchyard/helm/<version>/helm. When SWITCHYARD_HELM is set to an executable,
# builds nothing and prints it. How the build is cached and locked: scripts/lib/go-tool.sh.
set -euo pipefail
source "$(dirname "$0")/../lib/go-tool.sh"

HELM_VERSION="${1:-${SWITCHYARD_HELM_VERSION:-v3.22.0}}"

if [[ -n "${SWITCHYARD_HELM:-}" ]]; then
  GO_TOOL_NAME=helm
  [[ -x "$SWITCHYARD_HELM" ]] || go_tool_die "SWITCHYARD_HELM=$SWITCHYARD_HELM is not executable"
  printf '%s\n' "$SWITCHYARD_HELM"
  exit 0
fi

# helm's own Makefile sets the version this way.
GO_TOOL_MAJOR=v3 go_tool_build helm helm.sh/helm/v3 helm.sh/helm/v3/cmd/helm "$HELM_VERSION" \
  "-X helm.sh/helm/v3/internal/version.version=@VERSION@" version --short

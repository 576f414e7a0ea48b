#!/usr/bin/env python3
"""Makes a rank-8 LoRA adapter for a tiny model of make-model.py, with PEFT, from a seed.

    <venv>/bin/python scripts/engine/make-adapter.py --base <model dir> --seed 1

Run it with the engine's virtualenv (scripts/engine/install.sh prints it and installs PEFT in
it). Prints progress on stderr and, as the last line on stdout, the adapter directory:
$HOME/.cache/switchyard/adapters/<seed>/<hash>/, where <hash> is the first 12 hex digits of the
SHA-256 of this script and of the base model's switchyard-model.json (its seed and maker): an
edited script or another base makes a new adapter. `--out DIR` writes there instead, without
the cache.

What vLLM loads with `--enable-lora --lora-modules NAME=DIR`: PEFT's own `save_pretrained`
output (adapter_config.json and adapter_model.safetensors), rank 8, lora_alpha 16, on every
layer's q_proj and v_proj, as a fine-tune of a Llama would commonly be. No training, and none is
needed: the test wants vLLM's adapter handling (listing, loading, scheduling, metrics), not a
better model. PEFT initialises lora_B to zero (an adapter that changes nothing); here A and B are
drawn from numpy's PCG64 with the seed instead (sorted names, so the draw order does not depend
on PEFT's module order), with a standard deviation large enough that the adapter's greedy answer
differs from the base model's: a request that went to the base instead would show.

Safe to run concurrently: an flock on <cache>/adapters/<seed>/<hash>.lock serialises makers of
the same adapter; the directory is written beside its final place and renamed into it when
complete.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

RANK = 8
ALPHA = 16
TARGET_MODULES = ["q_proj", "v_proj"]
# The base model's weights have a standard deviation of 0.02; B·A·(ALPHA/RANK) with these is
# about 0.06 per entry, enough to change the greedy answer of the tiny model (checked by the
# test), small enough to keep the logits finite.
LORA_STD = 0.1
PEFT_HINT = "pip install --no-deps peft==0.21.2 accelerate==1.16.0 (scripts/engine/install.sh does)"


def log(message: str) -> None:
    print(f"[engine-adapter] {message}", file=sys.stderr, flush=True)


def identity(base: Path) -> str:
    """The hash naming the adapter: this script and the base model it was made for."""
    marker = base / "switchyard-model.json"
    if not marker.is_file():
        raise SystemExit(f"--base {base} is not a model of make-model.py (no switchyard-model.json)")
    digest = hashlib.sha256(Path(__file__).read_bytes())
    digest.update(marker.read_bytes())
    return digest.hexdigest()[:12]


def make(directory: Path, base: Path, seed: int) -> None:
    start = time.monotonic()
    try:
        import peft
        from peft import LoraConfig, get_peft_model
    except ImportError as err:
        raise SystemExit(f"PEFT is not installed in {sys.prefix} ({err}): {PEFT_HINT}")
    import numpy as np
    import torch
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(str(base), torch_dtype=torch.float32)
    config = LoraConfig(
        r=RANK,
        lora_alpha=ALPHA,
        target_modules=TARGET_MODULES,
        lora_dropout=0.0,
        bias="none",
        task_type="CAUSAL_LM",
    )
    adapted = get_peft_model(model, config)
    rng = np.random.default_rng(seed)
    drawn = 0
    with torch.no_grad():
        for name, parameter in sorted(adapted.named_parameters()):
            if "lora_A" not in name and "lora_B" not in name:
                continue
            values = rng.normal(0.0, LORA_STD, size=tuple(parameter.shape)).astype(np.float32)
            parameter.copy_(torch.from_numpy(values))
            drawn += int(parameter.numel())
    if drawn == 0:
        raise SystemExit(f"PEFT {peft.__version__} made no LoRA weights for {TARGET_MODULES}")
    adapted.save_pretrained(str(directory), safe_serialization=True)
    # PEFT keeps target_modules as a set and writes it in hash order, which changes from run to
    # run: sorted, the same seed gives byte-identical files.
    config_file = directory / "adapter_config.json"
    written = json.loads(config_file.read_text())
    written["target_modules"] = sorted(written["target_modules"])
    config_file.write_text(json.dumps(written, indent=2, sort_keys=True))
    # PEFT writes the absolute base path it was given; keep it (vLLM does not read it) but also
    # say what this is, for a person who finds the folder.
    (directory / "switchyard-adapter.json").write_text(json.dumps({
        "seed": seed,
        "base": str(base),
        "rank": RANK,
        "alpha": ALPHA,
        "targetModules": TARGET_MODULES,
        "loraWeights": drawn,
        "peft": peft.__version__,
    }, indent=2) + "\n")
    log(f"seed {seed}: {drawn} LoRA weights (rank {RANK} on {', '.join(TARGET_MODULES)}) "
        f"for {base}, made in {time.monotonic() - start:.1f} s")


def main() -> None:
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", required=True, help="the base model's directory (make-model.py's output)")
    parser.add_argument("--seed", type=int, required=True, help="weights seed (non-negative integer)")
    parser.add_argument("--out", help="write the adapter here instead of the cache (replaced if present)")
    args = parser.parse_args()
    if args.seed < 0:
        parser.error("--seed must be a non-negative integer")
    base = Path(args.base).resolve()
    name = identity(base)

    if args.out is not None:
        out = Path(args.out).resolve()
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        make(out, base, args.seed)
        print(out)
        return

    root = Path(os.environ.get("SWITCHYARD_CACHE_DIR", Path.home() / ".cache/switchyard")) / "adapters" / str(args.seed)
    out = root / name
    done = out / "switchyard-adapter.json"
    if done.is_file():
        print(out)
        return
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        # The maker we waited for may have finished it.
        if not done.is_file():
            # Work dirs of makers that were killed (we hold the lock, so none is in use).
            for stale in root.glob(f"{name}.work.*"):
                shutil.rmtree(stale, ignore_errors=True)
            work = Path(tempfile.mkdtemp(prefix=f"{name}.work.", dir=root))
            try:
                make(work, base, args.seed)
                work.chmod(0o755)
                shutil.rmtree(out, ignore_errors=True)
                os.rename(work, out)
            finally:
                shutil.rmtree(work, ignore_errors=True)
    print(out)


if __name__ == "__main__":
    main()

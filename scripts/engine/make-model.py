#!/usr/bin/env python3
"""Makes a tiny Llama model directory that vLLM can serve, deterministically from a seed.

    <venv>/bin/python scripts/engine/make-model.py --seed 1

Run it with the engine's virtualenv (scripts/engine/install.sh prints it): it needs torch,
transformers, tokenizers, safetensors and numpy, which vLLM depends on. Prints progress on stderr
and, as the last line on stdout, the model directory:
$HOME/.cache/switchyard/models/<seed>/<hash>/, where <hash> is the first 12 hex digits of this
script's SHA-256 (an edited script makes new models; old ones stay until deleted). `--out DIR`
writes there instead, without the cache.

No model can be downloaded here, and the test only needs vLLM's scheduler, KV and prefix cache,
streaming, metrics and HTTP API, not sensible answers. So the model is random: a byte-level BPE
tokenizer trained in a second with `tokenizers` on generated pseudo-words (the same corpus for
every seed, so every seed has the same tokenizer), a chat template so /v1/chat/completions works,
and a LlamaConfig with hidden size 128 and 2 heads (head dimension 64: vLLM's CPU attention
kernels refuse 16), 2 layers, a 1,024-token vocabulary, ~566k float32 weights drawn from numpy's
PCG64 with the seed (not from torch's or transformers' initialisers, whose draws may change
between releases). Two seeds give two artefacts with the same shape and tokenizer but different
weights, hence different greedy answers: the drift case.

The weights of the end-of-text and chat-marker tokens in the output layer are zero, so their
logit is 0 while the largest of the other ~1,000 logits is always positive: greedy decoding never
ends by itself, and an answer is exactly `max_tokens` long unless a stop sequence cuts it. Tests
rely on that.

Safe to run concurrently: an flock on <cache>/models/<seed>/<hash>.lock serialises makers of the
same model; the directory is written beside its final place and renamed into it when complete.
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

VOCAB_SIZE = 1024
HIDDEN_SIZE = 128
INTERMEDIATE_SIZE = 224
NUM_LAYERS = 2
NUM_HEADS = 2
MAX_POSITION_EMBEDDINGS = 4096
WEIGHT_STD = 0.02
# The corpus is the same for every seed: the tokenizer must not differ between artefacts, only
# the weights (a tokenizer change would be another kind of drift, and harder to reason about).
CORPUS_SEED = 20240601
CORPUS_LINES = 20_000

BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"
SPECIAL_TOKENS = [BOS, EOS, "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
# Role markers, then the text, then <|end|>; a generation prompt opens the assistant's turn.
# Content given as a list of parts (OpenAI's content parts) is joined from its text parts.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|end|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)


def log(message: str) -> None:
    print(f"[engine-model] {message}", file=sys.stderr, flush=True)


def script_hash() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]


def corpus(seed: int, lines: int) -> list[str]:
    """Sentences of pronounceable pseudo-words, digits and punctuation, plus some English."""
    import numpy as np

    rng = np.random.default_rng(seed)
    onsets = ["", "b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w",
              "st", "tr", "pl", "ch", "sh", "th", "gr", "br"]
    vowels = ["a", "e", "i", "o", "u", "ai", "ou", "ea", "io"]
    codas = ["", "", "n", "r", "s", "t", "l", "m", "nd", "st", "ng"]
    english = ("the of and to in is you that it he was for on are as with his they at be this "
               "have from or one had by word but not what all were we when your can said there "
               "use an each which she do how their if will up other about out many then them "
               "these so some her would make like him into time has look two more write go see "
               "hello model answer question request stream token server cache prefix").split()
    out = []
    for _ in range(lines):
        words = []
        for _ in range(int(rng.integers(4, 14))):
            kind = rng.random()
            if kind < 0.35:
                words.append(english[int(rng.integers(len(english)))])
            elif kind < 0.4:
                words.append(str(int(rng.integers(0, 10_000))))
            else:
                syllables = int(rng.integers(1, 4))
                words.append("".join(
                    onsets[int(rng.integers(len(onsets)))]
                    + vowels[int(rng.integers(len(vowels)))]
                    + codas[int(rng.integers(len(codas)))]
                    for _ in range(syllables)))
        sentence = " ".join(words)
        sentence = sentence[0].upper() + sentence[1:] + [".", ".", ".", "?", "!", ","][int(rng.integers(6))]
        out.append(sentence)
    return out


def make_tokenizer(directory: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(CORPUS_SEED, CORPUS_LINES), trainer)
    if tokenizer.get_vocab_size() != VOCAB_SIZE:
        raise SystemExit(f"the tokenizer has {tokenizer.get_vocab_size()} tokens, not {VOCAB_SIZE}")
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=EOS,
        additional_special_tokens=SPECIAL_TOKENS[2:],
        model_max_length=MAX_POSITION_EMBEDDINGS,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(directory))


def make_weights(directory: Path, seed: int) -> int:
    import numpy as np
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    added = {t["content"]: t["id"] for t in json.loads((directory / "tokenizer.json").read_text())["added_tokens"]}
    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=HIDDEN_SIZE,
        intermediate_size=INTERMEDIATE_SIZE,
        num_hidden_layers=NUM_LAYERS,
        num_attention_heads=NUM_HEADS,
        num_key_value_heads=NUM_HEADS,
        max_position_embeddings=MAX_POSITION_EMBEDDINGS,
        initializer_range=WEIGHT_STD,
        tie_word_embeddings=False,
        bos_token_id=added[BOS],
        eos_token_id=added[EOS],
        pad_token_id=added[EOS],
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    rng = np.random.default_rng(seed)
    state = {}
    # Sorted names: the draw order must not depend on how a transformers release orders modules.
    for name, tensor in sorted(model.state_dict().items()):
        if name.endswith("norm.weight"):
            values = np.ones(tuple(tensor.shape), dtype=np.float32)
        else:
            values = rng.normal(0.0, WEIGHT_STD, size=tuple(tensor.shape)).astype(np.float32)
        state[name] = torch.from_numpy(values)
    for token in SPECIAL_TOKENS:
        state["lm_head.weight"][added[token]] = 0.0
    model.load_state_dict(state, strict=True)
    model.save_pretrained(str(directory), safe_serialization=True)
    GenerationConfig(bos_token_id=added[BOS], eos_token_id=added[EOS], pad_token_id=added[EOS]).save_pretrained(str(directory))
    return sum(int(t.numel()) for t in state.values())


def make(directory: Path, seed: int) -> None:
    start = time.monotonic()
    make_tokenizer(directory)
    tokenizer_s = time.monotonic() - start
    weights = make_weights(directory, seed)
    (directory / "switchyard-model.json").write_text(json.dumps({
        "seed": seed,
        "script": script_hash(),
        "weights": weights,
    }, indent=2) + "\n")
    log(f"seed {seed}: tokenizer in {tokenizer_s:.1f} s, {weights} weights, "
        f"made in {time.monotonic() - start:.1f} s")


def main() -> None:
    # Quiet libraries: progress bars and warnings would bury the one line the caller reads.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, required=True, help="weights seed (non-negative integer)")
    parser.add_argument("--out", help="write the model here instead of the cache (replaced if present)")
    args = parser.parse_args()
    if args.seed < 0:
        parser.error("--seed must be a non-negative integer")

    if args.out is not None:
        out = Path(args.out).resolve()
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        make(out, args.seed)
        print(out)
        return

    root = Path(os.environ.get("SWITCHYARD_CACHE_DIR", Path.home() / ".cache/switchyard")) / "models" / str(args.seed)
    out = root / script_hash()
    done = out / "switchyard-model.json"
    if done.is_file():
        print(out)
        return
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{script_hash()}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        # The maker we waited for may have finished it.
        if not done.is_file():
            # Work dirs of makers that were killed (we hold the lock, so none is in use).
            for stale in root.glob(f"{script_hash()}.work.*"):
                shutil.rmtree(stale, ignore_errors=True)
            work = Path(tempfile.mkdtemp(prefix=f"{script_hash()}.work.", dir=root))
            try:
                make(work, args.seed)
                work.chmod(0o755)
                shutil.rmtree(out, ignore_errors=True)
                os.rename(work, out)
            finally:
                shutil.rmtree(work, ignore_errors=True)
    print(out)


if __name__ == "__main__":
    main()

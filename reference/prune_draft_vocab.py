#!/usr/bin/python3
"""Gives an Eagle3 draft a reduced vocabulary: the target's most frequent tokens, no retraining.

Why: a one-layer draft's largest matrix is its lm_head ([vocab, hidden]); on `mini` it is 1.67 MB
of the draft's ~2.5 MB read per drafted token. The draft only has to propose what the target will
accept, and the target's outputs concentrate on few tokens, so keeping the lm_head rows of the
`--keep` most frequent target tokens loses little acceptance for much less reading. This is
FR-Spec's frequency-ranked draft head (Zhao et al., 2025, "FR-Spec: Accelerating Large-Vocabulary
Language Models via Frequency-Ranked Speculative Sampling"); the result uses the published Eagle3
reduced-vocabulary layout (shared/serving-protocols.md §1.4): config `draft_vocab_size`, `d2t`
int64 [draft_vocab] offsets (target_id = draft_id + d2t[draft_id]), `t2d` bool [target_vocab].

Frequencies come from the target's own samples (the distribution the draft is asked to predict),
drawn by `kimi generate` at temperature 1 from the BOS token alone: no text, so no held-out text
can leak into the choice. Draft ids keep the target's order (d2t offsets are non-negative).
The draft's `embed_tokens` is dropped when it is byte for byte the target's (train_eagle3.py copies
it frozen): a draft without one shares the target's, as vLLM and kimi load it.

Pure Python (no numpy/torch): the safetensors file is rewritten by byte slices.

Run (models/mini-eagle3-fr1024 was made by exactly this):
  python3 reference/prune_draft_vocab.py --kimi build/kimi --target models/mini \
      --draft models/mini-eagle3 --out models/mini-eagle3-fr1024 --keep 1024 --samples 64 --tokens 256
"""
import argparse
import glob
import json
import os
import shutil
import struct
import subprocess
import sys
from collections import Counter

DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "I64": 8, "I32": 4, "BOOL": 1, "U8": 1}


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", None)
    return header, data, meta


def write_safetensors(path, tensors, meta):
    """tensors: list of (name, dtype, shape, bytes), written in that order."""
    header, offset = {}, 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    if meta:
        header["__metadata__"] = meta
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, _, raw in tensors:
            f.write(raw)


def sample_counts(kimi, target, bos, samples, tokens):
    counts = Counter()
    for seed in range(1, samples + 1):
        out = subprocess.run([kimi, "generate", "--model", target, "--prompt-ids", str(bos), "--temperature", "1",
                              "--seed", str(seed), "--max-tokens", str(tokens), "--ignore-eos", "--json"],
                             check=True, capture_output=True, text=True).stdout
        counts.update(json.loads(out)["tokens"])
    return counts


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kimi", required=True, help="the kimi binary")
    p.add_argument("--target", required=True)
    p.add_argument("--draft", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--keep", type=int, default=1024)
    p.add_argument("--samples", type=int, default=64)
    p.add_argument("--tokens", type=int, default=256)
    a = p.parse_args()

    with open(os.path.join(a.draft, "config.json")) as f:
        config = json.load(f)
    vocab = int(config["vocab_size"])
    if "draft_vocab_size" in config and int(config["draft_vocab_size"]) != vocab:
        sys.exit(f"{a.draft} already has a reduced vocabulary")
    if not 0 < a.keep < vocab:
        sys.exit(f"--keep must be in (0, {vocab})")
    with open(os.path.join(a.target, "config.json")) as f:
        target_config = json.load(f)
    bos = int(target_config["bos_token_id"])

    counts = sample_counts(a.kimi, a.target, bos, a.samples, a.tokens)
    ranked = sorted(range(vocab), key=lambda t: (-counts.get(t, 0), t))
    kept = sorted(ranked[:a.keep])
    total = sum(counts.values())
    covered = sum(counts.get(t, 0) for t in kept)

    header, data, meta = read_safetensors(os.path.join(a.draft, "model.safetensors"))
    target_embedding = None
    for path in sorted(glob.glob(os.path.join(a.target, "*.safetensors"))):
        t_header, t_data, _ = read_safetensors(path)
        for name, info in t_header.items():
            if name.endswith("model.embed_tokens.weight"):
                begin, end = info["data_offsets"]
                target_embedding = t_data[begin:end]
    out = []
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        begin, end = info["data_offsets"]
        raw = data[begin:end]
        if name == "lm_head.weight":
            rows, cols = info["shape"]
            row_bytes = cols * DTYPE_BYTES[info["dtype"]]
            assert rows == vocab and len(raw) == rows * row_bytes
            raw = b"".join(raw[t * row_bytes:(t + 1) * row_bytes] for t in kept)
            out.append((name, info["dtype"], [a.keep, cols], raw))
        elif name in ("d2t", "t2d"):
            continue
        elif name == "embed_tokens.weight" and raw == target_embedding:
            print("embed_tokens.weight equals the target's: left out (shared)")
            continue
        else:
            out.append((name, info["dtype"], info["shape"], raw))
    d2t = struct.pack(f"<{a.keep}q", *[t - i for i, t in enumerate(kept)])
    keep_set = set(kept)
    t2d = bytes(1 if t in keep_set else 0 for t in range(vocab))
    out += [("d2t", "I64", [a.keep], d2t), ("t2d", "BOOL", [vocab], t2d)]

    os.makedirs(a.out, exist_ok=True)
    for name in os.listdir(a.draft):
        if name not in ("config.json", "model.safetensors"):
            shutil.copy(os.path.join(a.draft, name), os.path.join(a.out, name))
    config["draft_vocab_size"] = a.keep
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    write_safetensors(os.path.join(a.out, "model.safetensors"), out, meta)
    print(f"kept {a.keep} of {vocab} tokens; they cover {covered} of {total} sampled target tokens "
          f"({100.0 * covered / max(total, 1):.1f} %, {a.samples} samples x {a.tokens} tokens)")


if __name__ == "__main__":
    main()

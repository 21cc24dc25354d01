#!/usr/bin/python3
"""Trains a DeepSeek-V3 MTP layer for `mini` by self-distillation and writes `mini` + that layer.

Layout (shared/serving-protocols.md §1.5, DeepSeek-V3's model.layers.61 naming): the layer is
model.layers.<L> (L = num_hidden_layers = 8) with embed_tokens (the target's, frozen), enorm,
hnorm, eh_proj [H, 2H] over concat(enorm(embed(token)), hnorm(h_prev)) (embedding FIRST, zero at
position 0), one decoder block of the target's type at index L (MLA + MoE, train_mini's Layer),
shared_head.norm and shared_head.head (initialised from the target's final norm and lm_head).
h_prev is the target's last hidden state AFTER its final norm (what vLLM hands its MTP layer).

Training: the frozen target runs on training text; the layer at position i reads token i+1 and
h_prev of position i and learns the target's next-token distribution at position i+1 (soft
cross-entropy), i.e. it predicts token i+2. Only the first MTP step is trained; decoding chains
further steps on the layer's own output (vLLM's behaviour with one MTP layer).

Output: OUT/ = models/mini's files (config with num_nextn_predict_layers 1) with the target's
weights in model-00001-of-00002.safetensors, the MTP layer in model-00002-of-00002.safetensors, and
model.safetensors.index.json. Measure it with the C++ engine:
  kimi bench latency --model OUT --prompt-file reference/mini-heldout.txt \
      --speculative-config '{"method":"mtp","num_speculative_tokens":1}' --num-speculative-tokens 1,2,3

Run: nice -n 19 /usr/bin/python3 reference/train_mtp.py --kimi build/kimi --out build/mini-mtp
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deepseek_v3_reference as ref  # noqa: E402
import train_mini as tm  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Mtp(nn.Module):
    def __init__(self, c):
        super().__init__()
        H, eps, L = c["hidden_size"], c["rms_norm_eps"], c["num_hidden_layers"]
        self.enorm = tm.RMSNorm(H, eps)
        self.hnorm = tm.RMSNorm(H, eps)
        self.eh_proj = tm._lin(2 * H, H)
        self.block = tm.Layer(c, L)
        self.shared_head_norm = tm.RMSNorm(H, eps)
        self.shared_head = tm._lin(H, c["vocab_size"])

    def forward(self, emb, hprev, cos, sin, mask):
        """emb, hprev [B, S, H] (row i at position i). Returns (h [B, S, H], logits [B, S, V])."""
        emb = emb.clone()
        emb[:, 0] = 0
        x = self.eh_proj(torch.cat([self.enorm(emb), self.hnorm(hprev)], -1))
        h = self.block(x, cos, sin, mask)
        return h, self.shared_head(self.shared_head_norm(h))


def target_states(target, ids):
    """The target's final-normed hidden states and logits [B, S, .] (no grad)."""
    with torch.no_grad():
        B, S = ids.shape
        cos, sin = target.rope(S)
        mask = torch.ones(S, S, dtype=torch.bool).triu(1)
        h = target.model.embed_tokens(ids)
        for layer in target.model.layers:
            h = layer(h, cos, sin, mask)
        hn = target.model.norm(h)
        return hn, target.lm_head(hn)


def tokenize(kimi, model, files, max_chars):
    text, n = [], 0
    for f in files:
        with open(f, errors="replace") as fh:
            t = fh.read()
        text.append(t)
        n += len(t)
        if n >= max_chars:
            break
    joined = "\n\n".join(text)[:max_chars]
    tmp = os.path.join(REPO, "build", "train_mtp_text.txt")
    os.makedirs(os.path.dirname(tmp), exist_ok=True)
    with open(tmp, "w") as fh:
        fh.write(joined)
    out = subprocess.run([kimi, "tokenize", "--model", model, "--file", tmp, "--json", "--no-special"],
                         check=True, capture_output=True, text=True).stdout
    return torch.tensor(json.loads(out), dtype=torch.long)


def export(mtp, c, prefix, target_dir, out):
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(target_dir):
        if not f.endswith(".safetensors") and not f.endswith(".index.json"):
            shutil.copy(os.path.join(target_dir, f), os.path.join(out, f))
    with open(os.path.join(target_dir, "config.json")) as fh:
        cfg = json.load(fh)
    (cfg["text_config"] if "text_config" in cfg else cfg)["num_nextn_predict_layers"] = 1
    with open(os.path.join(out, "config.json"), "w") as fh:
        json.dump(cfg, fh, indent=2)
    shutil.copy(os.path.join(target_dir, "model.safetensors"), os.path.join(out, "model-00001-of-00002.safetensors"))
    L = c["num_hidden_layers"]
    p = "%smodel.layers.%d." % (prefix, L)
    sd = mtp.state_dict()
    tensors = {}
    for n, t in sd.items():
        if n.startswith("block."):
            name = p + n[len("block."):]
        elif n == "shared_head_norm.weight":
            name = p + "shared_head.norm.weight"
        elif n == "shared_head.weight":
            name = p + "shared_head.head.weight"
        else:
            name = p + n
        tensors[name] = t.detach().to(torch.float32 if n.endswith("e_score_correction_bias") else torch.bfloat16)
    tensors[p + "embed_tokens.weight"] = mtp.embed.detach().to(torch.bfloat16)
    tm.write_safetensors(os.path.join(out, "model-00002-of-00002.safetensors"), tensors)
    weight_map = {n: "model-00001-of-00002.safetensors" for n in ref.SafetensorsDir(target_dir).names()}
    weight_map.update({n: "model-00002-of-00002.safetensors" for n in tensors})
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as fh:
        json.dump({"metadata": {}, "weight_map": weight_map}, fh, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=os.path.join(REPO, "models", "mini"))
    ap.add_argument("--kimi", default=os.path.join(REPO, "build", "kimi"))
    ap.add_argument("--out", default=os.path.join(REPO, "build", "mini-mtp"))
    ap.add_argument("--text-glob", default="/usr/share/doc/python3.11/html/_sources/library/*.rst.txt")
    ap.add_argument("--max-chars", type=int, default=600000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--time-budget", type=float, default=420)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    tensors = ref.SafetensorsDir(args.target)
    c, prefix = ref.load_model_config(args.target, tensors)
    target = tm.Mini(c)
    target.load_state_dict({n[len(prefix):]: tensors.get(n, torch.float32) for n in tensors.names()})
    target.eval()
    for q in target.parameters():
        q.requires_grad_(False)

    ids = tokenize(args.kimi, args.target, sorted(glob.glob(args.text_glob)), args.max_chars)
    print("training tokens: %d" % ids.numel(), flush=True)

    mtp = Mtp(c)
    L = c["num_hidden_layers"]
    with torch.no_grad():
        # Start from the target's last layer (same type) and its head; eh_proj passes the hidden
        # half through and adds a little of the embedding half.
        mtp.block.load_state_dict(target.model.layers[L - 1].state_dict())
        H = c["hidden_size"]
        mtp.eh_proj.weight.copy_(torch.cat([0.1 * torch.eye(H), torch.eye(H)], 1))
        mtp.shared_head_norm.weight.copy_(target.model.norm.weight)
        mtp.shared_head.weight.copy_(target.lm_head.weight)
    mtp.embed = target.model.embed_tokens.weight.detach()  # frozen (a plain tensor), saved with the layer
    params = [q for q in mtp.parameters() if q.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    g = torch.Generator().manual_seed(args.seed)
    S = args.seq
    cos, sin = ref.rope_cos_sin(c, S)
    mask = torch.ones(S, S, dtype=torch.bool).triu(1)
    start = time.time()
    for step in range(args.steps):
        offs = torch.randint(0, ids.numel() - S - 2, (args.batch,), generator=g)
        batch = torch.stack([ids[o:o + S + 1] for o in offs.tolist()])       # [B, S+1]
        hn, tlog = target_states(target, batch[:, :S + 1])
        # Row i: token i+1, h_prev of i; label: the target's distribution at i+1.
        emb = F.embedding(batch[:, 1:S + 1], mtp.embed)
        _, logits = mtp(emb, hn[:, :S], cos, sin, mask)
        soft = tlog[:, 1:S + 1].float().softmax(-1)
        loss = -(soft * logits.log_softmax(-1)).sum(-1).mean()
        opt.zero_grad()
        loss.backward()
        for gr in opt.param_groups:
            gr["lr"] = args.lr * min(1.0, (step + 1) / 10)
        opt.step()
        with torch.no_grad():
            agree = (logits.argmax(-1) == tlog[:, 1:S + 1].argmax(-1)).float().mean().item()
        el = time.time() - start
        if step % 5 == 0:
            print("step %d loss %.3f top-1 agreement %.3f (%.0f s)" % (step, loss.item(), agree, el), flush=True)
        if args.time_budget and el > args.time_budget:
            print("time budget reached at step %d" % step, flush=True)
            break
    export(mtp, c, prefix, args.target, args.out)
    print("wrote %s" % args.out, flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Golden outputs of the Eagle3 draft models/mini-eagle3 on top of the target models/mini.

The target runs through reference/deepseek_v3_reference.py (its residual-stream dump: entry j is
the hidden state ENTERING layer j, entry L the last layer's output before the final norm, which is
vLLM's aux-hidden-state convention). The draft is written here from the published Eagle3 modelling
description (vLLM / SGLang llama_eagle3, shared/serving-protocols.md section 1.4), in plain torch:

  features  = fc(concat(h[low], h[mid], h[high]))                       [S, H]
  attn in   = concat(input_layernorm(embed(token)), hidden_norm(hidden)) [S, 2H] (embedding first)
  q, k, v   = q/k/v_proj(attn in); Llama rope (rotate_half pairing, YaRN inv_freq, cos/sin scaled
              by the YaRN attention factor); causal softmax(q.k / sqrt(head_dim)) v; o_proj
  h         = hidden + attn (norm_before_residual false); h = h + mlp(post_attention_layernorm(h))
  logits    = lm_head(norm(h)); draft ids map to target ids through d2t when present.

Draft position i consumes token i+1 with the target features of position i. Over the prompt
x_0..x_{n-1} plus the target's greedy next token t, the draft runs positions 0..n-1 (tokens
x_1..x_{n-1}, t); the last row's logits give draft token d1; then (d1, h_last) at position n gives
d2, (d2, h) at n+1 gives d3 (the greedy chain of 3 drafts).

Writes tests/data/golden/mini-eagle3/: cases.json (ids, target token, aux ids, drafts, shapes),
capture.f32 ([3, n, hidden] target hidden states at the aux ids, float32 little-endian) and
draft_logits.f32 ([3, vocab]: the logits behind d1, d2, d3).

Run: /usr/bin/python3 reference/eagle3_golden.py  (Debian python3-torch, python3-numpy)
"""
import argparse
import json
import math
import os
import struct
import sys

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import deepseek_v3_reference as ref  # noqa: E402  (the TARGET only)

# The first 12 tokens of the second English sentence of tests/data/golden/mini: the drafts differ
# from one another and each leads its runner-up by > 0.7 (checked for the committed weights; other
# lengths give near-ties).
PROMPT = [3599, 1263, 45, 841, 291, 811, 258, 666, 46, 412, 613, 1940]
NUM_DRAFTS = 3


def read_safetensors(path):
    """{name: float32/int64 tensor} of one .safetensors file (own reader: bf16, f16, f32, i64)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        a, b = meta["data_offsets"]
        raw = bytearray(data[a:b])
        dt = meta["dtype"]
        if dt == "BF16":
            t = torch.frombuffer(raw, dtype=torch.int16).to(torch.int32) << 16
            t = t.view(torch.float32)
        elif dt == "F16":
            t = torch.frombuffer(raw, dtype=torch.float16).float()
        elif dt == "F32":
            t = torch.frombuffer(raw, dtype=torch.float32).clone()
        elif dt == "I64":
            t = torch.frombuffer(raw, dtype=torch.int64).clone()
        elif dt == "BOOL":
            t = torch.frombuffer(raw, dtype=torch.bool).clone()
        else:
            raise SystemExit("%s: unsupported dtype %s for %s" % (path, dt, name))
        out[name] = t.reshape(meta["shape"])
    return out


def rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


class Draft:
    def __init__(self, d):
        with open(os.path.join(d, "config.json")) as f:
            self.c = json.load(f)
        w = read_safetensors(os.path.join(d, "model.safetensors"))
        self.w = {k.replace("layers.0.", "midlayer."): v for k, v in w.items()}
        c = self.c
        self.eps = c["rms_norm_eps"]
        self.nh, self.nkv = c["num_attention_heads"], c["num_key_value_heads"]
        self.hd = c.get("head_dim", c["hidden_size"] // self.nh)
        # HF Llama YaRN (_compute_yarn_parameters): blend of extrapolated and interpolated
        # frequencies with a linear ramp between the beta_fast / beta_slow correction dims
        # (floored / ceiled), attention factor 0.1 ln(factor) + 1 on cos and sin.
        rs = c["rope_scaling"]
        base, dim, factor = c["rope_theta"], self.hd, rs["factor"]
        orig = rs["original_max_position_embeddings"]
        pos_freqs = base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
        extra, inter = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)

        def corr(rot):
            return (dim * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(base))
        low = max(math.floor(corr(rs["beta_fast"])), 0)
        high = min(math.ceil(corr(rs["beta_slow"])), dim - 1)
        if low == high:
            high += 0.001
        ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
        extra_w = 1 - ramp
        self.inv_freq = inter * (1 - extra_w) + extra * extra_w
        self.attn_factor = 0.1 * math.log(factor) + 1.0
        self.d2t = self.w.get("d2t")
        self.embed = self.w["embed_tokens.weight"]

    def lin(self, name, x):
        return x @ self.w[name + ".weight"].t()

    def rope(self, x, pos):  # x [S, nh, hd]
        ang = pos.double()[:, None] * self.inv_freq[None, :]
        ang = torch.cat([ang, ang], -1)
        cos = (ang.cos() * self.attn_factor).float()[:, None, :]
        sin = (ang.sin() * self.attn_factor).float()[:, None, :]
        h = x.shape[-1] // 2
        rot = torch.cat([-x[..., h:], x[..., :h]], -1)
        return x * cos + rot * sin

    def layer(self, tok, hidden, pos, cache):
        """tok [S], hidden [S, H] pre-norm, pos [S]; appends this step's K, V to cache and attends
        causally over everything cached. Returns the layer's output hidden [S, H]."""
        m = "midlayer."
        x = torch.cat([rms(self.embed[tok], self.w[m + "input_layernorm.weight"], self.eps),
                       rms(hidden, self.w[m + "hidden_norm.weight"], self.eps)], -1)
        S = x.shape[0]
        q = self.rope(self.lin(m + "self_attn.q_proj", x).view(S, self.nh, self.hd), pos)
        k = self.rope(self.lin(m + "self_attn.k_proj", x).view(S, self.nkv, self.hd), pos)
        v = self.lin(m + "self_attn.v_proj", x).view(S, self.nkv, self.hd)
        cache["pos"] = torch.cat([cache["pos"], pos])
        cache["k"] = torch.cat([cache["k"], k])
        cache["v"] = torch.cat([cache["v"], v])
        K = cache["k"].repeat_interleave(self.nh // self.nkv, 1)
        V = cache["v"].repeat_interleave(self.nh // self.nkv, 1)
        s = torch.einsum("qhd,khd->hqk", q, K) / math.sqrt(self.hd)
        s = s.masked_fill(cache["pos"][None, None, :] > pos[None, :, None], float("-inf"))
        a = torch.einsum("hqk,khd->qhd", s.softmax(-1), V).reshape(S, self.nh * self.hd)
        resid = rms(hidden, self.w[m + "hidden_norm.weight"], self.eps) if self.c.get("norm_before_residual") else hidden
        h = resid + self.lin(m + "self_attn.o_proj", a)
        g = rms(h, self.w[m + "post_attention_layernorm.weight"], self.eps)
        return h + self.lin(m + "mlp.down_proj", torch.nn.functional.silu(self.lin(m + "mlp.gate_proj", g))
                            * self.lin(m + "mlp.up_proj", g))

    def logits(self, h):
        lg = self.lin("lm_head", rms(h, self.w["norm.weight"], self.eps))
        return lg

    def to_target(self, d):
        return int(d + self.d2t[d]) if self.d2t is not None else int(d)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default=os.path.join(here, "..", "models", "mini"))
    ap.add_argument("--draft", default=os.path.join(here, "..", "models", "mini-eagle3"))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "data", "golden", "mini-eagle3"))
    args = ap.parse_args()
    torch.set_num_threads(1)

    W, cfg = ref.load_model(args.target)
    dump = []
    with torch.no_grad():
        tlogits = ref.forward(W, cfg, PROMPT, dump)
    t = int(tlogits[-1].argmax())
    draft = Draft(args.draft)
    dc = draft.c
    aux = dc.get("eagle_aux_hidden_state_layer_ids") or dc.get("eagle_config", {}).get("eagle_aux_hidden_state_layer_ids")
    capture = torch.stack([dump[j] for j in aux]).float()          # [3, n, H]
    n = len(PROMPT)
    seq = PROMPT + [t]
    cache = {"pos": torch.zeros(0, dtype=torch.long), "k": torch.zeros(0, draft.nkv, draft.hd),
             "v": torch.zeros(0, draft.nkv, draft.hd)}
    rows, drafts = [], []
    with torch.no_grad():
        feats = torch.cat([capture[0], capture[1], capture[2]], -1)   # [low, mid, high]
        hidden = draft.lin("fc", feats)
        h = draft.layer(torch.tensor(seq[1:n + 1]), hidden, torch.arange(n), cache)[-1:]
        for step in range(NUM_DRAFTS):
            lg = draft.logits(h)[0]
            rows.append(lg)
            d = draft.to_target(int(lg.argmax()))
            drafts.append(d)
            if step + 1 == NUM_DRAFTS:
                break
            h = draft.layer(torch.tensor([d]), h, torch.tensor([n + step]), cache)
    os.makedirs(args.out, exist_ok=True)
    capture.numpy().astype("<f4").tofile(os.path.join(args.out, "capture.f32"))
    lg = torch.stack(rows)
    lg.numpy().astype("<f4").tofile(os.path.join(args.out, "draft_logits.f32"))
    top2 = lg.topk(2, -1).values
    with open(os.path.join(args.out, "cases.json"), "w") as f:
        json.dump({"generator": "reference/eagle3_golden.py",
                   "prompt_ids": PROMPT, "target_token": t, "aux_layer_ids": aux,
                   "capture_file": "capture.f32", "capture_shape": list(capture.shape),
                   "logits_file": "draft_logits.f32", "logits_shape": list(lg.shape),
                   "drafts": drafts, "margins": (top2[:, 0] - top2[:, 1]).tolist()}, f, indent=1)
    print("target token %d, drafts %s, top-2 margins %s" % (t, drafts, (top2[:, 0] - top2[:, 1]).tolist()))


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Golden outputs of DeepSeek-V3's multi-token-prediction (MTP) layer on the tiny preset.

The target runs through reference/deepseek_v3_reference.py (its residual-stream dump: the last
entry is the last layer's output before the final norm). The MTP layer, model.layers.<L> with
L = num_hidden_layers, is written here from the structure of the published modelling code
(vLLM / SGLang deepseek_mtp, DeepSeek-V3 technical report section 2.2;
shared/serving-protocols.md section 1.5), reusing only the reference's decoder-block pieces
(MLA attention, MoE / MLP, RMSNorm) that the target itself uses:

  h_prev    = model.norm(last layer output)   (step 0: the target's hidden state after its final
              norm, which is what vLLM's DeepseekV2Model returns and its MTP layer consumes)
  e         = model.layers.L.embed_tokens(token), zero at position 0
  x         = eh_proj(concat(enorm(e), hnorm(h_prev)))           (embedding FIRST)
  h         = x + attn(input_layernorm(x)); h = h + moe(post_attention_layernorm(h))
  logits    = shared_head.head(shared_head.norm(h))
  later chain steps read h (before shared_head.norm) as their h_prev.

MTP position i consumes token i+1 with h_prev of position i. Over the prompt x_0..x_{n-1} plus the
target's greedy next token t, the layer runs positions 0..n-1 (tokens x_1..x_{n-1}, t); the last
row's logits give draft d1; (d1, h of row n-1) at position n gives d2; (d2, h) at n+1 gives d3.
The reference attends over the whole row sequence each time (no cache), causally.

Writes tests/data/golden/tiny-mtp/: cases.json (prompt, target token, drafts, shapes), hprev.f32
([n, hidden]: the normed target states fed at step 0) and draft_logits.f32 ([3, vocab]), and
swapped_logits.f32 ([3, vocab]): the same chain with concat(hnorm(h), enorm(e)), the order a
wrong implementation would use (the C++ test shows it is far from the golden).

Run: /usr/bin/python3 reference/mtp_golden.py --model DIR  where DIR is
`kimi make-model DIR --preset tiny --seed 0 --mtp-layers 1` (reference/make_golden.sh does both).
"""
import argparse
import json
import os
import sys

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import deepseek_v3_reference as ref  # noqa: E402

PROMPT = [17, 923, 4, 511, 88, 1000, 250, 3, 77, 640, 641, 642, 12, 9]
NUM_DRAFTS = 3


def mtp_rows(W, cfg, tokens, hprev, swapped=False):
    """Runs the MTP layer over rows 0..S-1 (row i at position i). Returns h [S, H]."""
    L = cfg["num_hidden_layers"]
    p = "model.layers.%d." % L
    eps = cfg["rms_norm_eps"]
    emb_name = p + "embed_tokens.weight" if W.has(p + "embed_tokens.weight") else "model.embed_tokens.weight"
    e = W(emb_name)[torch.tensor(tokens, dtype=torch.long)].clone()
    e[0] = 0  # position 0: masked (vLLM's inputs_embeds[positions == 0] = 0)
    en = ref.rms_norm(e, W(p + "enorm.weight"), eps)
    hn = ref.rms_norm(hprev, W(p + "hnorm.weight"), eps)
    cat = torch.cat([hn, en], -1) if swapped else torch.cat([en, hn], -1)
    x = ref.linear(W, p + "eh_proj", cat)
    cos, sin = ref.rope_cos_sin(cfg, len(tokens))
    a = ref.rms_norm(x, W(p + "input_layernorm.weight"), eps)
    h = x + ref.mla_attention(W, cfg, p + "self_attn.", a, cos, sin)
    m = ref.rms_norm(h, W(p + "post_attention_layernorm.weight"), eps)
    if ref.layer_is_moe(cfg, L):
        h = h + ref.moe(W, cfg, p + "mlp.", m)
    else:
        h = h + ref.swiglu_mlp(W, p + "mlp", m)
    return h


def mtp_logits(W, cfg, h):
    p = "model.layers.%d." % cfg["num_hidden_layers"]
    return ref.rms_norm(h, W(p + "shared_head.norm.weight"), cfg["rms_norm_eps"]) @ W(p + "shared_head.head.weight").t()


def chain(W, cfg, prompt, t, hprev, swapped):
    n = len(prompt)
    tokens = list(prompt[1:]) + [t]
    hp = hprev.clone()
    rows, drafts = [], []
    for step in range(NUM_DRAFTS):
        h = mtp_rows(W, cfg, tokens, hp, swapped)
        lg = mtp_logits(W, cfg, h[-1:])[0]
        rows.append(lg)
        d = int(lg.argmax())
        drafts.append(d)
        # The next row: the draft token with this row's own output as h_prev.
        tokens.append(d)
        hp = torch.cat([hp, h[-1:]], 0)
    assert len(tokens) == n + NUM_DRAFTS
    return torch.stack(rows), drafts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="tiny preset with --mtp-layers 1")
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "data", "golden", "tiny-mtp"))
    args = ap.parse_args()
    torch.set_num_threads(1)

    W, cfg = ref.load_model(args.model)
    if cfg.get("num_nextn_predict_layers", 0) < 1:
        raise SystemExit("%s has no MTP layer (num_nextn_predict_layers)" % args.model)
    dump = []
    with torch.no_grad():
        tlogits = ref.forward(W, cfg, PROMPT, dump)
        t = int(tlogits[-1].argmax())
        hprev = ref.rms_norm(dump[-1], W("model.norm.weight"), cfg["rms_norm_eps"])  # [n, H]
        lg, drafts = chain(W, cfg, PROMPT, t, hprev, swapped=False)
        swapped, swapped_drafts = chain(W, cfg, PROMPT, t, hprev, swapped=True)
    os.makedirs(args.out, exist_ok=True)
    hprev.float().numpy().astype("<f4").tofile(os.path.join(args.out, "hprev.f32"))
    lg.float().numpy().astype("<f4").tofile(os.path.join(args.out, "draft_logits.f32"))
    swapped.float().numpy().astype("<f4").tofile(os.path.join(args.out, "swapped_logits.f32"))
    top2 = lg.topk(2, -1).values
    with open(os.path.join(args.out, "cases.json"), "w") as f:
        json.dump({"generator": "reference/mtp_golden.py",
                   "model": "kimi make-model --preset tiny --seed 0 --mtp-layers 1",
                   "prompt_ids": PROMPT, "target_token": t,
                   "hprev_file": "hprev.f32", "hprev_shape": list(hprev.shape),
                   "logits_file": "draft_logits.f32", "logits_shape": list(lg.shape),
                   "swapped_logits_file": "swapped_logits.f32",
                   "drafts": drafts, "swapped_drafts": swapped_drafts,
                   "margins": (top2[:, 0] - top2[:, 1]).tolist()}, f, indent=1)
        f.write("\n")
    print("target token %d, drafts %s (swapped order: %s), top-2 margins %s"
          % (t, drafts, swapped_drafts, (top2[:, 0] - top2[:, 1]).tolist()))


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Trains an Eagle3 draft for `mini` by self-distillation, and measures its greedy acceptance.

Layout (the published Eagle3 one, shared/serving-protocols.md §1.4, shared/kimi-k25-facts.md §6):
  fc [H, 3*H_target] over the three captured target hidden states concatenated [low, mid, high];
  one decoder layer `midlayer.*` whose attention input is concat(input_layernorm(embed(token)),
  hidden_norm(hidden)) of 2*H (embedding first), q/k/v_proj [., 2H], o_proj, post_attention_layernorm,
  SwiGLU mlp; residual = the un-normalised hidden (norm_before_residual false); then norm, lm_head.
  Full target vocabulary (no draft_vocab_size, no d2t/t2d), like lightseekorg/kimi-k2.5-eagle3.
  Rope: Llama's rotate_half pairing over the whole head_dim, YaRN factor 64 / beta_fast 32 /
  beta_slow 1 / original 4096 without mscale keys, so cos/sin carry 0.1*ln(64)+1 (HF's default
  YaRN attention factor), softmax scale 1/sqrt(head_dim).

Captured target states: vLLM's convention, layer id j = the residual stream at the INPUT of target
layer j; ids (2, L//2, L-3) as vLLM's default (= outputs of layers 1, L//2-1, L-4, TorchSpec's
post-layer ids). Written as `eagle_aux_hidden_state_layer_ids` at top level and in `eagle_config`.

Training (self-distillation, as TorchSpec/SpecForge): the frozen target runs on training text; the
draft learns the target's next-token DISTRIBUTION (soft cross-entropy) from the target's captured
states, unrolled for --ttt steps ("training-time test"): step k at position i takes the draft's own
output hidden from step k-1 and the token at i+k+1, sits at rope position i+k, and attends to the
step-0 keys at positions <= i plus its own chain at position i (exactly what decoding does with a
draft KV cache). Token embeddings are the target's (copied, frozen) and saved with the draft.

With --self-data N, a share (--self-share) of every batch's rows comes instead from N greedy
continuations the target itself writes (`kimi generate` on --self-prompt-len-token windows of the
training text, --self-gen tokens each, cached in the data folder): decoding drafts the target's
own continuations, and those are where the draft must agree with it (as EAGLE-style recipes
regenerate their training answers with the target).

Evaluation: greedy speculative decoding simulated with full recomputation: the target's greedy
continuation of held-out prompts, 3 draft tokens per step; reports the mean number of accepted draft
tokens per step and the mean acceptance length (accepted + the target's own token).

Run:
  nice -n 19 /usr/bin/python3 reference/train_eagle3.py --target models/mini --data build/mini_data \
      --out models/mini-eagle3 > mini_eagle3.log 2>&1
  --eval-only  measures an existing draft (--out) without training.
  --init DIR   goes on training an existing draft (its config.json, not the shape flags, decides
               the shape) instead of a new one; the learning-rate schedule starts afresh.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deepseek_v3_reference as ref  # noqa: E402
import train_mini as tm  # noqa: E402

torch.set_grad_enabled(True)
SEED = 3
NEG = float("-inf")


def load_target(model_dir):
    tensors = ref.SafetensorsDir(model_dir)
    c, prefix = ref.load_model_config(model_dir, tensors)
    model = tm.Mini(c)
    sd = {n[len(prefix):]: tensors.get(n, torch.float32) for n in tensors.names()}
    model.load_state_dict(sd)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model, c


def aux_layer_ids(L):
    return [2, L // 2, L - 3]


def draft_config(tc, args):
    V, H = tc["vocab_size"], tc["hidden_size"]
    aux = aux_layer_ids(tc["num_hidden_layers"])
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "num_hidden_layers": 1,
        "hidden_size": H,
        "target_hidden_size": H,
        "intermediate_size": args.intermediate,
        "num_attention_heads": args.heads,
        "num_key_value_heads": args.heads,
        "head_dim": H // args.heads,
        "hidden_act": "silu",
        "vocab_size": V,
        "rms_norm_eps": 1e-6,
        "rope_theta": 50000.0,
        "rope_scaling": {"rope_type": "yarn", "type": "yarn", "factor": 64.0,
                         "original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0},
        "max_position_embeddings": 262144,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "norm_before_residual": False,
        "bos_token_id": V - 256,
        "eos_token_id": V - 255,
        "torch_dtype": "bfloat16",
        "eagle_aux_hidden_state_layer_ids": aux,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": aux, "use_aux_hidden_state": True},
    }


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], -1)


class Midlayer(nn.Module):
    def __init__(self, dc):
        super().__init__()
        H, nh, hd = dc["hidden_size"], dc["num_attention_heads"], dc["head_dim"]
        eps = dc["rms_norm_eps"]
        self.hidden_norm = tm.RMSNorm(H, eps)
        self.input_layernorm = tm.RMSNorm(H, eps)
        self.self_attn = nn.Module()
        self.self_attn.q_proj = tm._lin(2 * H, nh * hd)
        self.self_attn.k_proj = tm._lin(2 * H, dc["num_key_value_heads"] * hd)
        self.self_attn.v_proj = tm._lin(2 * H, dc["num_key_value_heads"] * hd)
        self.self_attn.o_proj = tm._lin(nh * hd, H)
        self.post_attention_layernorm = tm.RMSNorm(H, eps)
        self.mlp = tm.MLP(H, dc["intermediate_size"])


class Eagle3(nn.Module):
    def __init__(self, dc):
        super().__init__()
        self.dc = dc
        H, V = dc["hidden_size"], dc["vocab_size"]
        self.embed_tokens = nn.Embedding(V, H)
        self.fc = tm._lin(3 * dc["target_hidden_size"], H)
        self.midlayer = Midlayer(dc)
        self.norm = tm.RMSNorm(H, dc["rms_norm_eps"])
        self.lm_head = tm._lin(H, V)
        # Llama YaRN: the DeepSeek reference computes the same inv_freq and (without mscale keys)
        # the same 0.1*ln(factor)+1 attention factor; only the pairing differs (rotate_half here).
        rc = {"qk_rope_head_dim": dc["head_dim"], "rope_theta": dc["rope_theta"],
              "rope_scaling": {k: v for k, v in dc["rope_scaling"].items() if k != "rope_type"}}
        self.inv_freq, self.rope_mscale = ref.rope_inv_freq_and_mscale(rc)

    def cos_sin(self, pos):
        ang = pos.float()[:, None] * self.inv_freq[None, :]
        ang = torch.cat([ang, ang], -1)
        return ang.cos() * self.rope_mscale, ang.sin() * self.rope_mscale

    def qkv(self, tok, hidden, pos):
        """tok [B,S], hidden [B,S,H] (pre-norm), pos [S] -> q, k, v [B,nh,S,hd]."""
        m, dc = self.midlayer, self.dc
        B, S, _ = hidden.shape
        nh, hd = dc["num_attention_heads"], dc["head_dim"]
        x = torch.cat([m.input_layernorm(self.embed_tokens(tok)), m.hidden_norm(hidden)], -1)
        q = m.self_attn.q_proj(x).view(B, S, nh, hd).transpose(1, 2)
        k = m.self_attn.k_proj(x).view(B, S, nh, hd).transpose(1, 2)
        v = m.self_attn.v_proj(x).view(B, S, nh, hd).transpose(1, 2)
        cos, sin = self.cos_sin(pos)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        return q, k, v

    def finish(self, hidden, attn_out):
        m = self.midlayer
        B, nh, S, hd = attn_out.shape
        h = hidden + m.self_attn.o_proj(attn_out.transpose(1, 2).reshape(B, S, nh * hd))
        return h + m.mlp(m.post_attention_layernorm(h))

    def logits(self, h):
        return self.lm_head(self.norm(h))

    def unroll(self, tokens, feats, steps):
        """Training-time test. tokens [B,S+steps] (token i+k+1 feeds step k at i), feats [B,S,3H].
        Returns a list of `steps` outputs (hidden [B,S,H], logits [B,S,V])."""
        B, S, _ = feats.shape
        hd = self.dc["head_dim"]
        hidden = self.fc(feats)
        keys, vals, outs = [], [], []
        base = torch.arange(S)
        causal = torch.ones(S, S, dtype=torch.bool).triu(1)        # True = masked
        off_diag = ~torch.eye(S, dtype=torch.bool)
        for k in range(steps):
            q, kk, vv = self.qkv(tokens[:, k + 1:k + 1 + S], hidden, base + k)
            keys.append(kk)
            vals.append(vv)
            K = torch.cat(keys, 2)
            Vv = torch.cat(vals, 2)
            mask = torch.cat([causal] + [off_diag] * k, 1)              # [S, S*(k+1)]
            att = (q @ K.transpose(-1, -2)) / math.sqrt(hd)
            att = att.masked_fill(mask, NEG).softmax(-1)
            hidden = self.finish(hidden, att @ Vv)
            outs.append((hidden, self.logits(hidden)))
        return outs


def target_features(target, ids, aux):
    cap = {i: None for i in aux}
    with torch.no_grad():
        logits = target(ids, capture=cap)
    return torch.cat([cap[i] for i in aux], -1), logits


def save_draft(draft, dc, tok_dir, out):
    os.makedirs(out, exist_ok=True)
    tensors = {n: t.detach().to(torch.bfloat16) for n, t in draft.state_dict().items()}
    tm.write_safetensors(os.path.join(out, "model.safetensors"), tensors)
    tm.write_json(os.path.join(out, "config.json"), dc)
    tm.copy_tokenizer(tok_dir, out)


def load_draft(out):
    with open(os.path.join(out, "config.json")) as f:
        dc = json.load(f)
    d = Eagle3(dc)
    t = ref.SafetensorsDir(out)
    d.load_state_dict({n: t.get(n, torch.float32) for n in t.names()})
    d.eval()
    return d, dc


# ---------------------------------------------------------------------------
# Evaluation: greedy speculative decoding, recomputed from scratch each step
# ---------------------------------------------------------------------------

@torch.no_grad()
def draft_propose(draft, seq, feats, n_draft, forced=None, logits_out=None):
    """seq: committed tokens x_0..x_m plus the target's pending token t at the end (len m+2);
    feats [1, m+1, 3H] for positions 0..m. Returns n_draft greedy draft tokens after t.
    forced / logits_out: feed these tokens instead of the draft's own and collect the logits (the
    consistency check against `unroll`)."""
    S = feats.shape[1]
    hidden = draft.fc(feats)
    hd = draft.dc["head_dim"]
    tok = torch.tensor(seq[1:S + 1])[None]                  # token i+1 at position i
    q, k, v = draft.qkv(tok, hidden, torch.arange(S))
    causal = torch.ones(S, S, dtype=torch.bool).triu(1)
    att = ((q @ k.transpose(-1, -2)) / math.sqrt(hd)).masked_fill(causal, NEG).softmax(-1)
    h = draft.finish(hidden, att @ v)[:, -1:]               # the last position: predicts after t
    K, Vv = k, v
    out = []
    for step in range(n_draft):
        lg = draft.logits(h)[0, -1]
        if logits_out is not None:
            logits_out.append(lg)
        d = int(lg.argmax()) if forced is None else forced[step]
        out.append(d)
        if step + 1 == n_draft:
            break
        q1, k1, v1 = draft.qkv(torch.tensor([[d]]), h, torch.tensor([S - 1 + step + 1]))
        K = torch.cat([K, k1], 2)
        Vv = torch.cat([Vv, v1], 2)
        att = ((q1 @ K.transpose(-1, -2)) / math.sqrt(hd)).softmax(-1)
        h = draft.finish(h, att @ Vv)
    return out


@torch.no_grad()
def evaluate(target, draft, aux, held, prompts, prompt_len, gen_len, n_draft=3, seed=SEED):
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, held.size - prompt_len - 1, size=prompts)
    accepted, steps = [], 0
    for s in starts:
        seq = [int(x) for x in held[s:s + prompt_len]]
        feats, logits = target_features(target, torch.tensor(seq)[None], aux)
        seq.append(int(logits[0, -1].argmax()))            # the target's pending token
        produced = 0
        while produced < gen_len:
            drafts = draft_propose(draft, seq, feats, n_draft)
            full = torch.tensor(seq + drafts)[None]
            f_all, lg = target_features(target, full, aux)
            greedy = lg[0].argmax(-1).tolist()
            m = len(seq) - 1                                  # index of the pending token
            a = 0
            while a < n_draft and drafts[a] == greedy[m + a]:
                a += 1
            accepted.append(a)
            steps += 1
            seq += drafts[:a]
            seq.append(greedy[m + a])                        # correction / bonus token
            produced += a + 1
            feats = f_all[:, :len(seq) - 1]                   # causal: unaffected by rejected drafts
    acc = float(np.mean(accepted))
    return {"steps": steps, "mean_accepted_drafts": acc, "mean_acceptance_length": acc + 1.0,
            "draft_tokens": n_draft, "prompts": prompts, "prompt_len": prompt_len, "gen_len": gen_len,
            "histogram": np.bincount(accepted, minlength=n_draft + 1).tolist()}


def self_generated(args, train, eos):
    """The target's greedy continuations of args.self_data training windows, as one id array
    (prompt, continuation, EOS for each); written once to the data folder and reused."""
    path = os.path.join(args.data, "self_gen_%d_%d_%d_%d.ids.npy" % (args.self_data, args.self_prompt_len,
                                                                   args.self_gen, args.seed))
    if os.path.exists(path):
        return np.load(path)
    rng = np.random.default_rng(args.seed + 17)
    starts = rng.integers(0, train.size - args.self_prompt_len, size=args.self_data)

    def one(start):
        prompt = train[start:start + args.self_prompt_len].tolist()
        out = subprocess.run([args.kimi, "generate", "--model", args.target, "--prompt-ids", ",".join(map(str, prompt)),
                              "--max-tokens", str(args.self_gen), "--threads", "1", "--json"],
                             check=True, capture_output=True, text=True)
        return prompt + json.loads(out.stdout)["tokens"] + [eos]

    t0 = time.time()
    with ThreadPoolExecutor(max_workers=args.threads) as ex:
        seqs = list(ex.map(one, starts))
    ids = np.array([t for s in seqs for t in s], dtype=np.int32)
    np.save(path, ids)
    print("self-generated: %d continuations, %d tokens in %.0f s -> %s" % (len(seqs), ids.size, time.time() - t0, path),
          flush=True)
    return ids


def new_draft(tc, args, target):
    """A draft of the flags' shape: random layers, the target's embeddings and head."""
    dc = draft_config(tc, args)
    draft = Eagle3(dc)
    g = torch.Generator().manual_seed(args.seed)
    with torch.no_grad():
        for n, p in draft.named_parameters():
            if n.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 0.02)
        draft.embed_tokens.weight.copy_(target.model.embed_tokens.weight)
        draft.lm_head.weight.copy_(target.lm_head.weight)   # a good start: the target's own head
    return draft, dc


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="models/mini")
    ap.add_argument("--data", default="build/mini_data")
    ap.add_argument("--out", default="models/mini-eagle3")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--time-budget", type=float, default=0, help="stop training after this many seconds")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--ttt", type=int, default=3, help="training-time-test unroll steps")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--init", help="an existing draft directory to go on training instead of a new draft")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--intermediate", type=int, default=512)
    ap.add_argument("--eval-prompts", type=int, default=12)
    ap.add_argument("--eval-prompt-len", type=int, default=48)
    ap.add_argument("--eval-gen", type=int, default=48)
    ap.add_argument("--eval-only", action="store_true")
    ap.add_argument("--eval-json", default="build/mini_eagle3_eval.json")
    ap.add_argument("--self-data", type=int, default=0, help="target-written continuations to train on (0: none)")
    ap.add_argument("--self-prompt-len", type=int, default=32)
    ap.add_argument("--self-gen", type=int, default=128)
    ap.add_argument("--self-share", type=float, default=0.5, help="share of each batch's rows from them")
    ap.add_argument("--kimi", default="build/kimi", help="the binary that writes them")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    target, tc = load_target(args.target)
    aux = aux_layer_ids(tc["num_hidden_layers"])
    held = np.load(os.path.join(args.data, "heldout.ids.npy"))
    if args.eval_only:
        draft, dc = load_draft(args.out)
        r = evaluate(target, draft, aux, held, args.eval_prompts, args.eval_prompt_len, args.eval_gen)
        print("eval: " + json.dumps(r), flush=True)
        return
    train = np.load(os.path.join(args.data, "train.ids.npy"))
    gen, gen_rows = None, 0
    if args.self_data > 0:
        with open(os.path.join(args.data, "meta.json")) as f:
            gen = self_generated(args, train, json.load(f)["eos_id"])
        gen_rows = max(1, min(args.batch - 1, round(args.batch * args.self_share)))
    if args.init:   # go on training an existing draft (its config.json wins over the flags)
        draft, dc = load_draft(args.init)
        draft.train()
    else:
        draft, dc = new_draft(tc, args, target)
    draft.embed_tokens.weight.requires_grad_(False)
    params = [p for p in draft.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    n_params = sum(p.numel() for p in draft.parameters())
    print("eagle3 draft: %d params (%.1f MB bf16), aux layers %s, ttt %d" % (n_params, n_params * 2 / 1e6, aux,
                                                                            args.ttt), flush=True)
    r0 = None
    t0 = time.time()
    S, K = args.seq, args.ttt
    for step in range(args.steps):
        if args.time_budget and time.time() - t0 > args.time_budget:
            break
        lr = args.lr * min(1.0, (step + 1) / 10) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / args.steps)))
        for gr in opt.param_groups:
            gr["lr"] = lr
        x, _ = tm.batch_at(train, step, args.batch - gen_rows, S + K + 1, args.seed)   # S+K+1 tokens per row
        if gen_rows:
            x = torch.cat([x, tm.batch_at(gen, step, gen_rows, S + K + 1, args.seed + 1)[0]])
        feats, logits = target_features(target, x, aux)
        probs = logits.softmax(-1)
        outs = draft.unroll(x, feats[:, :S], K)
        loss, accs = 0.0, []
        for k, (_, lg) in enumerate(outs):
            # step k at position i predicts the token after i+k+1: the target's distribution there
            p = probs[:, k + 1:k + 1 + S]
            loss = loss - (p * lg.log_softmax(-1)).sum(-1).mean() / K
            accs.append((lg.argmax(-1) == p.argmax(-1)).float().mean().item())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if (step + 1) % 10 == 0 or step == 0:
            print("step %d loss %.4f top1 agreement by ttt step %s elapsed %.0f s"
                  % (step + 1, loss.item(), ["%.3f" % a for a in accs], time.time() - t0), flush=True)
    train_s = time.time() - t0
    save_draft(draft, dc, os.path.join(args.data, "tokenizer"), args.out)
    draft.eval()
    r = evaluate(target, draft, aux, held, args.eval_prompts, args.eval_prompt_len, args.eval_gen)
    r["train_seconds"] = train_s
    r["train_steps"] = step + 1
    print("eval: " + json.dumps(r), flush=True)
    with open(args.eval_json, "w") as f:
        json.dump(r, f, indent=1)


if __name__ == "__main__":
    main()

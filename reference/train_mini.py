#!/usr/bin/python3
"""Trains `mini`, a small model of exactly the Kimi-K2.5 language-model architecture, on CPU.

Architecture (DeepSeek-V3 / Kimi-K2.5 text model, sizes scaled down):
  MLA with q and kv LoRA ranks (q_a -> RMSNorm -> q_b; kv_a_proj_with_mqa -> RMSNorm -> kv_b), a
  shared rope key, YaRN rope scaling with Kimi-K2.5's published parameters and the mscale_all_dim
  softmax correction; layer 0 dense SwiGLU, layers 1.. MoE with the sigmoid router, noaux_tc
  top-k chosen by score + e_score_correction_bias, weights = the uncorrected scores of the chosen
  experts renormalised (norm_topk_prob) times routed_scaling_factor, plus one shared expert.
  The rope tables, rope pairing, softmax scale and RMSNorm come from the project's independent
  reference forward (deepseek_v3_reference.py), so the trained weights mean the same thing there.

Load balancing is DeepSeek-V3's auxiliary-loss-free method: after every optimiser step each MoE
layer's bias moves by u * sign(mean_load - load_e) (no gradient; the bias only affects which
experts are chosen, never the weights).

Writes a Kimi-K2.5 HF checkpoint directory (config.json with text_config, model.safetensors with
`language_model.`-prefixed names, generation_config.json, tiktoken.model, tokenizer_config.json,
chat_template.jinja) that `kimi generate --model DIR` loads.

Run (data from reference/mini_data.py):
  nohup nice -n 19 /usr/bin/python3 reference/train_mini.py --data build/mini_data \
      --work build/mini_train --out models/mini > build/mini_train.log 2>&1 &
  ... --resume   continues from build/mini_train/ckpt.pt
"""
import argparse
import json
import math
import os
import shutil
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deepseek_v3_reference as ref  # noqa: E402

torch.set_grad_enabled(True)  # the reference module turns autograd off for itself at import

SEED = 20261203


def mini_text_config(vocab_size, args):
    """The text_config of `mini`: Kimi-K2.5's published values except for the sizes."""
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "kimi_k2",
        "vocab_size": vocab_size,
        "hidden_size": args.hidden,
        "intermediate_size": args.intermediate,
        "moe_intermediate_size": args.moe_intermediate,
        "num_hidden_layers": args.layers,
        "num_attention_heads": args.heads,
        "num_key_value_heads": args.heads,
        "q_lora_rank": args.q_lora,
        "kv_lora_rank": args.kv_lora,
        "qk_nope_head_dim": args.nope,
        "qk_rope_head_dim": args.rope,
        "v_head_dim": args.vdim,
        "n_routed_experts": args.experts,
        "num_experts_per_tok": args.topk,
        "n_shared_experts": 1,
        "n_group": 1,
        "topk_group": 1,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "num_nextn_predict_layers": 0,
        "routed_scaling_factor": 2.827,
        "scoring_func": "sigmoid",
        "topk_method": "noaux_tc",
        "norm_topk_prob": True,
        "hidden_act": "silu",
        "max_position_embeddings": 262144,
        "rope_theta": 50000.0,
        "rope_scaling": {"type": "yarn", "factor": 64.0, "original_max_position_embeddings": 4096,
                         "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0},
        "rms_norm_eps": 1e-5,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "aux_loss_alpha": 0.001,
        "seq_aux": True,
        "ep_size": 1,
        "pretraining_tp": 1,
        "initializer_range": 0.02,
        "use_cache": True,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": vocab_size - 256,
        "eos_token_id": vocab_size - 255,
        "pad_token_id": vocab_size - 1,
    }


# ---------------------------------------------------------------------------
# Model: module and parameter names are the checkpoint's tensor names
# ---------------------------------------------------------------------------

class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return ref.rms_norm(x, self.weight, self.eps)


def _lin(i, o):
    return nn.Linear(i, o, bias=False)


class MLA(nn.Module):
    def __init__(self, c):
        super().__init__()
        H, h = c["num_attention_heads"], c["hidden_size"]
        self.c = c
        self.q_a_proj = _lin(h, c["q_lora_rank"])
        self.q_a_layernorm = RMSNorm(c["q_lora_rank"], c["rms_norm_eps"])
        self.q_b_proj = _lin(c["q_lora_rank"], H * (c["qk_nope_head_dim"] + c["qk_rope_head_dim"]))
        self.kv_a_proj_with_mqa = _lin(h, c["kv_lora_rank"] + c["qk_rope_head_dim"])
        self.kv_a_layernorm = RMSNorm(c["kv_lora_rank"], c["rms_norm_eps"])
        self.kv_b_proj = _lin(c["kv_lora_rank"], H * (c["qk_nope_head_dim"] + c["v_head_dim"]))
        self.o_proj = _lin(H * c["v_head_dim"], h)
        self.scale = ref.attention_softmax_scale(c)

    def forward(self, x, cos, sin, mask):
        c = self.c
        B, S, _ = x.shape
        H, nope, rope, vd, r = (c["num_attention_heads"], c["qk_nope_head_dim"], c["qk_rope_head_dim"],
                                c["v_head_dim"], c["kv_lora_rank"])
        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x))).view(B, S, H, nope + rope)
        q_nope, q_pe = q[..., :nope], q[..., nope:]
        kv_a = self.kv_a_proj_with_mqa(x)
        kv = self.kv_b_proj(self.kv_a_layernorm(kv_a[..., :r])).view(B, S, H, nope + vd)
        k_nope, v = kv[..., :nope], kv[..., nope:]
        q_pe = ref.apply_rope(q_pe, cos, sin)
        k_pe = ref.apply_rope(kv_a[..., r:].view(B, S, 1, rope), cos, sin)
        qh = torch.cat([q_nope, q_pe], -1).transpose(1, 2)                     # [B,H,S,d]
        kh = torch.cat([k_nope, k_pe.expand(B, S, H, rope)], -1).transpose(1, 2)
        att = (qh @ kh.transpose(-1, -2)) * self.scale
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        out = (att @ v.transpose(1, 2)).transpose(1, 2).reshape(B, S, H * vd)
        return self.o_proj(out)


class MLP(nn.Module):
    def __init__(self, h, inter):
        super().__init__()
        self.gate_proj = _lin(h, inter)
        self.up_proj = _lin(h, inter)
        self.down_proj = _lin(inter, h)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Gate(nn.Module):
    def __init__(self, h, E):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(E, h))
        # float32 in the checkpoint as in Kimi-K2.5; a buffer: moved by the balancing rule only.
        self.register_buffer("e_score_correction_bias", torch.zeros(E, dtype=torch.float32))


class MoE(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, E = c["hidden_size"], c["n_routed_experts"]
        self.c = c
        self.gate = Gate(h, E)
        self.experts = nn.ModuleList([MLP(h, c["moe_intermediate_size"]) for _ in range(E)])
        self.shared_experts = MLP(h, c["moe_intermediate_size"] * c["n_shared_experts"])
        self.last_load = None

    def forward(self, x):
        c = self.c
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        logits = x @ self.gate.weight.t()
        # The reference's routing rule (sigmoid, noaux_tc, norm_topk_prob, routed_scaling_factor);
        # the chosen experts' weights keep their gradient to the router.
        bias = self.gate.e_score_correction_bias
        w, idx = ref.route_tokens(c, logits, bias.detach())
        E = c["n_routed_experts"]
        self.last_load = torch.bincount(idx.flatten(), minlength=E).float().detach()
        out = self.shared_experts(x)
        for e in range(E):
            tok, slot = (idx == e).nonzero(as_tuple=True)
            if tok.numel() == 0:
                continue
            y = self.experts[e](x[tok]) * w[tok, slot][:, None]
            out = out.index_add(0, tok, y)
        return out.view(shape)


class Layer(nn.Module):
    def __init__(self, c, i):
        super().__init__()
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.self_attn = MLA(c)
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.mlp = MoE(c) if ref.layer_is_moe(c, i) else MLP(c["hidden_size"], c["intermediate_size"])

    def forward(self, h, cos, sin, mask):
        h = h + self.self_attn(self.input_layernorm(h), cos, sin, mask)
        return h + self.mlp(self.post_attention_layernorm(h))


class Inner(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList([Layer(c, i) for i in range(c["num_hidden_layers"])])
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


class Mini(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.model = Inner(c)
        self.lm_head = _lin(c["hidden_size"], c["vocab_size"])
        self._rope = {}

    def rope(self, S):
        if S not in self._rope:
            self._rope[S] = ref.rope_cos_sin(self.c, S)
        return self._rope[S]

    def forward(self, ids, capture=None):
        """Logits [B,S,V]. capture: a dict {layer id: None} filled with the hidden state (residual
        stream) at the INPUT of those layers (vLLM's Eagle3 aux-hidden-state convention)."""
        B, S = ids.shape
        cos, sin = self.rope(S)
        mask = torch.ones(S, S, dtype=torch.bool).triu(1)
        h = self.model.embed_tokens(ids)
        for i, layer in enumerate(self.model.layers):
            if capture is not None and i in capture:
                capture[i] = h
            h = layer(h, cos, sin, mask)
        return self.lm_head(self.model.norm(h))

    def moe_layers(self):
        return [l.mlp for l in self.model.layers if isinstance(l.mlp, MoE)]


def init_weights(model, c, seed):
    g = torch.Generator().manual_seed(seed)
    std = c["initializer_range"]
    out_std = std / math.sqrt(2 * c["num_hidden_layers"])
    for name, p in model.named_parameters():
        if name.endswith("layernorm.weight") or name.endswith("norm.weight"):
            nn.init.ones_(p)
        elif name.endswith(("o_proj.weight", "down_proj.weight")):
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=g) * out_std)
        else:
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=g) * std)


# ---------------------------------------------------------------------------
# Checkpoint export (Kimi-K2.5 HF layout)
# ---------------------------------------------------------------------------

def write_safetensors(path, tensors):
    """tensors: name -> torch tensor (bf16 / f32 / i64 / bool). Own writer: no safetensors package."""
    dt = {torch.bfloat16: "BF16", torch.float32: "F32", torch.int64: "I64", torch.bool: "BOOL",
          torch.int32: "I32", torch.float16: "F16"}
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous().cpu()
        if t.dtype == torch.bfloat16:
            raw = t.view(torch.int16).numpy().tobytes()
        elif t.dtype == torch.bool:
            raw = t.numpy().astype(np.uint8).tobytes()
        else:
            raw = t.numpy().tobytes()
        header[name] = {"dtype": dt[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def kimi_k25_top_config(text_config):
    """The Kimi-K2.5 wrapper around text_config (same keys as `kimi make-model --form kimi-k25`)."""
    V, h = text_config["vocab_size"], text_config["hidden_size"]
    return {
        "architectures": ["KimiK25ForConditionalGeneration"],
        "auto_map": {"AutoConfig": "configuration_kimi_k25.KimiK25Config",
                     "AutoModel": "modeling_kimi_k25.KimiK25ForConditionalGeneration",
                     "AutoModelForCausalLM": "modeling_kimi_k25.KimiK25ForConditionalGeneration"},
        "bos_token_id": V - 256,
        "dtype": "bfloat16",
        "eos_token_id": V - 255,
        "ignore_index": -100,
        "media_placeholder_token_id": V - 256 + 21,
        "model_type": "kimi_k25",
        "pad_token_id": V - 1,
        "text_config": text_config,
        "tie_word_embeddings": False,
        "use_unified_vision_chunk": True,
        "video_placeholder": "<|kimi_k25_video_placeholder|>",
        # Text-only model: the vision tower is described (as the real config does) but has no tensors.
        "vision_config": {"init_pos_emb_height": 64, "init_pos_emb_time": 4, "init_pos_emb_width": 64,
                          "merge_kernel_size": [2, 2], "merge_type": "sd2_tpool", "mm_hidden_size": 64,
                          "mm_projector_type": "patchmerger", "model_type": "moonvit3d", "patch_size": 14,
                          "pos_emb_type": "divided_fixed", "projector_hidden_act": "gelu",
                          "projector_ln_eps": 1e-05, "text_hidden_size": h, "video_attn_type": "spatial_temporal",
                          "vt_hidden_size": 64, "vt_intermediate_size": 128, "vt_num_attention_heads": 4,
                          "vt_num_hidden_layers": 2},
    }


def copy_tokenizer(tok_dir, out):
    for f in ("tiktoken.model", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copyfile(os.path.join(tok_dir, f), os.path.join(out, f))


def export_hf(model, c, tok_dir, out, extra=None):
    os.makedirs(out, exist_ok=True)
    tensors = {}
    for name, t in model.state_dict().items():
        t = t.detach()
        tensors["language_model." + name] = t.float() if name.endswith("e_score_correction_bias") else t.to(torch.bfloat16)
    write_safetensors(os.path.join(out, "model.safetensors"), tensors)
    top = kimi_k25_top_config(c)
    if extra:
        top.update(extra)
    write_json(os.path.join(out, "config.json"), top)
    V = c["vocab_size"]
    write_json(os.path.join(out, "generation_config.json"),
               {"bos_token_id": V - 256, "eos_token_id": V - 254, "max_length": 262144})  # <|im_end|> stops
    copy_tokenizer(tok_dir, out)


# ---------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------

def batch_at(data, step, batch, seq, seed):
    """Deterministic per step (so --resume continues the same stream): random windows."""
    rng = np.random.default_rng(seed * 1_000_003 + step)
    starts = rng.integers(0, data.size - seq - 1, size=batch)
    x = np.stack([data[s:s + seq + 1] for s in starts]).astype(np.int64)
    return torch.from_numpy(x[:, :-1]), torch.from_numpy(x[:, 1:])


@torch.no_grad()
def heldout_nll(model, data, seq, max_tokens, batch=8):
    """Mean NLL (nats/token) over non-overlapping windows of `seq` (first max_tokens ids)."""
    model.eval()
    n = min(data.size - 1, max_tokens) // seq
    tot, cnt = 0.0, 0
    for i in range(0, n, batch):
        rows = [data[j * seq:j * seq + seq + 1].astype(np.int64) for j in range(i, min(n, i + batch))]
        x = torch.from_numpy(np.stack(rows))
        logits = model(x[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum")
        tot += loss.item()
        cnt += x[:, 1:].numel()
    model.train()
    return tot / max(cnt, 1), cnt


def unigram_nll(train, held, V, seq, max_tokens):
    """Add-one unigram model from the training ids, on the same predicted positions as heldout_nll."""
    counts = np.bincount(train, minlength=V).astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    n = min(held.size - 1, max_tokens) // seq
    targets = np.concatenate([held[j * seq + 1:j * seq + seq + 1] for j in range(n)])
    return float(-logp[targets].mean()), int(targets.size)


def lr_at(step, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    t = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def load_hf(model_dir):
    tensors = ref.SafetensorsDir(model_dir)
    c, prefix = ref.load_model_config(model_dir, tensors)
    model = Mini(c)
    model.load_state_dict({n[len(prefix):]: tensors.get(n, torch.float32) for n in tensors.names()})
    model.eval()
    return model, c


def eval_file(args):
    import subprocess
    model, c = load_hf(args.out)
    ids = subprocess.run([args.kimi, "tokenize", "--model", args.out, "--file", args.eval_file, "--json"],
                         check=True, capture_output=True, text=True).stdout
    held = np.array(json.loads(ids), dtype=np.int32)
    train = np.load(os.path.join(args.data, "train.ids.npy"))
    nll, cnt = heldout_nll(model, held, args.seq, 10 ** 12)
    uni, ucnt = unigram_nll(train, held, c["vocab_size"], args.seq, 10 ** 12)
    r = {"file": args.eval_file, "tokens_predicted": cnt, "window": args.seq, "nll": nll, "ppl": math.exp(nll),
         "unigram_nll": uni, "unigram_ppl": math.exp(uni)}
    print("eval-file: " + json.dumps(r), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="build/mini_data")
    ap.add_argument("--work", default="build/mini_train", help="training checkpoint (ckpt.pt) folder")
    ap.add_argument("--out", default="models/mini", help="HF checkpoint directory written at each save")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--bias-update", type=float, default=1e-3, help="u of the aux-loss-free balancing")
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--eval-tokens", type=int, default=8192)
    ap.add_argument("--final-eval-tokens", type=int, default=65536)
    ap.add_argument("--save-every", type=int, default=50)
    ap.add_argument("--time-budget", type=float, default=0,
                    help="stop (and save) once this many seconds are trained, even before --steps")
    ap.add_argument("--eval-file", default=None,
                    help="no training: perplexity of the --out checkpoint on this text file (tokenized by "
                         "`kimi tokenize`, windows of --seq) beside the unigram baseline")
    ap.add_argument("--kimi", default="build/kimi")
    ap.add_argument("--bench", type=int, default=0, help="time N steps and exit (sizing)")
    # sizes
    ap.add_argument("--hidden", type=int, default=192)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--q-lora", type=int, default=96)
    ap.add_argument("--kv-lora", type=int, default=64)
    ap.add_argument("--nope", type=int, default=32)
    ap.add_argument("--rope", type=int, default=16)
    ap.add_argument("--vdim", type=int, default=32)
    ap.add_argument("--intermediate", type=int, default=512)
    ap.add_argument("--moe-intermediate", type=int, default=128)
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--topk", type=int, default=2)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    if args.eval_file:
        return eval_file(args)
    with open(os.path.join(args.data, "meta.json")) as f:
        meta = json.load(f)
    train = np.load(os.path.join(args.data, "train.ids.npy"))
    held = np.load(os.path.join(args.data, "heldout.ids.npy"))
    tok_dir = os.path.join(args.data, "tokenizer")
    V = meta["vocab_size"]
    c = mini_text_config(V, args)
    os.makedirs(args.work, exist_ok=True)
    ckpt_path = os.path.join(args.work, "ckpt.pt")

    model = Mini(c)
    init_weights(model, c, args.seed)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embed" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "embed" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95))
    step, elapsed = 0, 0.0
    if args.resume and os.path.exists(ckpt_path):
        ck = torch.load(ckpt_path)
        if ck["text_config"] != c:
            raise SystemExit("--resume: checkpoint sizes differ from the flags")
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step, elapsed = ck["step"], ck["elapsed"]
        print("resumed at step %d (%.0f s trained)" % (step, elapsed), flush=True)

    n_params = sum(p.numel() for p in model.parameters())
    per_tok = sum(p.numel() for n, p in model.named_parameters()
                  if ".experts." not in n and "embed" not in n) + \
        sum(p.numel() for n, p in model.named_parameters() if ".experts.0." in n) * args.topk
    print("mini: %d params (%.1f MB bf16), %d active per token; vocab %d; train %d tokens, held-out %d"
          % (n_params, n_params * 2 / 1e6, per_tok, V, train.size, held.size), flush=True)
    print("config: %s" % json.dumps({k: c[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                                         "q_lora_rank", "kv_lora_rank", "n_routed_experts",
                                                         "num_experts_per_tok", "moe_intermediate_size")}),
          flush=True)
    uni, ucnt = unigram_nll(train, held, V, args.seq, args.final_eval_tokens)
    print("unigram baseline on held-out (%d tokens): nll %.4f ppl %.2f" % (ucnt, uni, math.exp(uni)), flush=True)

    if args.bench:
        t0 = time.time()
        for s in range(args.bench):
            x, y = batch_at(train, s, args.batch, args.seq, args.seed)
            loss = F.cross_entropy(model(x).reshape(-1, V), y.reshape(-1))
            loss.backward()
            opt.zero_grad()
        dt = (time.time() - t0) / args.bench
        print("bench: %.2f s/step, %.0f tokens/s" % (dt, args.batch * args.seq / dt), flush=True)
        return

    def save():
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "elapsed": elapsed,
                    "text_config": c, "args": vars(args)}, ckpt_path + ".tmp")
        os.replace(ckpt_path + ".tmp", ckpt_path)
        export_hf(model, c, tok_dir, args.out)

    model.train()
    t_last = time.time()
    loss_acc, n_acc = 0.0, 0
    while step < args.steps and not (args.time_budget and elapsed > args.time_budget):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args)
        x, y = batch_at(train, step, args.batch, args.seq, args.seed)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        # Auxiliary-loss-free balancing (DeepSeek-V3 §2.1.2): underloaded experts' bias goes up.
        with torch.no_grad():
            for m in model.moe_layers():
                load = m.last_load
                m.gate.e_score_correction_bias += args.bias_update * torch.sign(load.mean() - load)
        step += 1
        now = time.time()
        elapsed += now - t_last
        t_last = now
        loss_acc += loss.item()
        n_acc += 1
        if step % 10 == 0:
            loads = torch.stack([m.last_load for m in model.moe_layers()])
            imb = (loads.max(1).values / loads.mean(1)).mean().item()
            print("step %d loss %.4f lr %.2e max/mean expert load %.2f elapsed %.0f s (%.0f tok/s)"
                  % (step, loss_acc / n_acc, lr_at(step, args), imb, elapsed,
                     step * args.batch * args.seq / max(elapsed, 1e-9)), flush=True)
            loss_acc, n_acc = 0.0, 0
        if step % args.eval_every == 0 or step == args.steps:
            nll, cnt = heldout_nll(model, held, args.seq, args.eval_tokens)
            print("eval step %d held-out nll %.4f ppl %.2f (%d tokens; unigram ppl %.2f)"
                  % (step, nll, math.exp(nll), cnt, math.exp(uni)), flush=True)
            t_last = time.time()
        if step % args.save_every == 0 or step == args.steps:
            save()
            t_last = time.time()
    nll, cnt = heldout_nll(model, held, args.seq, args.final_eval_tokens)
    print("final held-out (%d tokens, window %d): nll %.4f ppl %.2f | unigram nll %.4f ppl %.2f | trained %.0f s"
          % (cnt, args.seq, nll, math.exp(nll), uni, math.exp(uni), elapsed), flush=True)
    with open(os.path.join(args.work, "final.json"), "w") as f:
        json.dump({"step": step, "heldout_tokens": cnt, "heldout_nll": nll, "heldout_ppl": math.exp(nll),
                   "unigram_nll": uni, "unigram_ppl": math.exp(uni), "train_seconds": elapsed,
                   "params": n_params, "active_params_per_token": per_tok}, f, indent=1)
    save()


if __name__ == "__main__":
    main()

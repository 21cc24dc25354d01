#!/usr/bin/python3
"""Independent float32 reference forward pass for DeepSeek-V3-architecture models.

Covers DeepseekV3ForCausalLM checkpoints and the language model inside
Kimi-K2.5 (KimiK25ForConditionalGeneration) checkpoints.  Written from the
semantics of the published modelling code:

  * deepseek-ai/DeepSeek-V3  inference/model.py
  * Hugging Face modeling_deepseek.py (DeepseekV3ForCausalLM, shipped with the
    deepseek-ai/DeepSeek-V3 checkpoint) and transformers' deepseek_v3 model.

Everything (weights and activations) is float32; nothing is rounded to bf16.
Attention is the naive (non-absorbed) MLA form over the whole sequence with a
causal mask, positions 0..S-1.  The result is the logits for every position.

Usage:
  /usr/bin/python3 reference/deepseek_v3_reference.py --model DIR --out OUT \
      --prompt-ids 1,2,3 [--prompt-ids 4,5 ...]

Output: OUT/cases.json and OUT/caseK.f32 (raw little-endian float32,
row-major [S, vocab_size]).  See reference/README.md.

Only torch and numpy are used (no safetensors / transformers packages).
"""

import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch

torch.set_grad_enabled(False)


# ---------------------------------------------------------------------------
# Minimal safetensors reader
# ---------------------------------------------------------------------------

# safetensors dtype -> (numpy dtype of the stored element, element size)
_ST_DTYPES = {
    "BF16": (np.dtype("<u2"), 2),   # converted by hand: uint16 << 16 -> float32
    "F16": (np.dtype("<f2"), 2),
    "F32": (np.dtype("<f4"), 4),
    "F64": (np.dtype("<f8"), 8),
    "I8": (np.dtype("i1"), 1),
    "U8": (np.dtype("u1"), 1),
    "I16": (np.dtype("<i2"), 2),
    "I32": (np.dtype("<i4"), 4),
    "I64": (np.dtype("<i8"), 8),
}


def read_safetensors_header(path):
    """Return (header dict without __metadata__, byte offset of the data section)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n).decode("utf-8"))
    header.pop("__metadata__", None)
    return header, 8 + n


class SafetensorsDir:
    """Lazy access to the tensors of a model directory.

    The directory holds either model.safetensors or the shards listed in
    model.safetensors.index.json ({"weight_map": {name: file}}).
    """

    def __init__(self, model_dir):
        self.model_dir = model_dir
        index_path = os.path.join(model_dir, "model.safetensors.index.json")
        single_path = os.path.join(model_dir, "model.safetensors")
        if os.path.exists(index_path):
            with open(index_path) as f:
                weight_map = json.load(f)["weight_map"]
            files = sorted(set(weight_map.values()))
        elif os.path.exists(single_path):
            files = ["model.safetensors"]
        else:
            raise FileNotFoundError("no model.safetensors or model.safetensors.index.json in " + model_dir)
        self.entries = {}  # name -> (file path, data start, info)
        for fn in files:
            path = os.path.join(model_dir, fn)
            header, data_start = read_safetensors_header(path)
            for name, info in header.items():
                self.entries[name] = (path, data_start, info)
        self._maps = {}

    def __contains__(self, name):
        return name in self.entries

    def names(self):
        return self.entries.keys()

    def _raw(self, path):
        if path not in self._maps:
            self._maps[path] = np.memmap(path, dtype=np.uint8, mode="r")
        return self._maps[path]

    def get(self, name, dtype=torch.float32):
        """Load a tensor, converted to `dtype` (float32 by default)."""
        path, data_start, info = self.entries[name]
        st_dtype = info["dtype"]
        if st_dtype not in _ST_DTYPES:
            raise ValueError("tensor %s: unsupported safetensors dtype %s" % (name, st_dtype))
        np_dtype, size = _ST_DTYPES[st_dtype]
        begin, end = info["data_offsets"]
        shape = list(info["shape"])
        count = int(np.prod(shape)) if shape else 1
        if end - begin != count * size:
            raise ValueError("tensor %s: byte length %d does not match shape %s" % (name, end - begin, shape))
        raw = self._raw(path)[data_start + begin:data_start + end]
        arr = np.frombuffer(raw.tobytes(), dtype=np_dtype, count=count)
        if st_dtype == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        arr = arr.reshape(shape)
        if dtype is None:
            return torch.from_numpy(np.array(arr))
        return torch.from_numpy(np.array(arr, dtype=np.float64 if dtype == torch.float64 else np.float32)).to(dtype)


# ---------------------------------------------------------------------------
# Config
# ---------------------------------------------------------------------------

# Defaults of the published DeepseekV3Config (configuration_deepseek.py), used
# only for keys absent from config.json (a warning is printed for each).
_CONFIG_DEFAULTS = {
    "n_shared_experts": None,
    "n_routed_experts": None,
    "routed_scaling_factor": 1.0,
    "topk_method": "greedy",
    "n_group": 1,
    "topk_group": 1,
    "moe_layer_freq": 1,
    "first_k_dense_replace": 0,
    "norm_topk_prob": False,
    "scoring_func": "softmax",
    "hidden_act": "silu",
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "rope_scaling": None,
    "attention_bias": False,
    "q_lora_rank": None,
    "tie_word_embeddings": False,
}

_REQUIRED_KEYS = [
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
    "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
]


def load_model_config(model_dir, tensors):
    """Return (text config dict, tensor name prefix) for a model directory."""
    with open(os.path.join(model_dir, "config.json")) as f:
        top = json.load(f)
    archs = top.get("architectures") or []
    if "text_config" in top or "KimiK25ForConditionalGeneration" in archs:
        cfg = dict(top["text_config"])
        # Fields the multimodal wrapper keeps only at top level.
        for k in ("tie_word_embeddings",):
            if k not in cfg and k in top:
                cfg[k] = top[k]
        prefix = "language_model."
    else:
        cfg = dict(top)
        prefix = ""
    # Trust the tensor names if they disagree with the guess from config.json.
    for p in (prefix, "language_model.", ""):
        if p + "model.embed_tokens.weight" in tensors:
            prefix = p
            break
    else:
        raise KeyError("cannot find model.embed_tokens.weight (with or without language_model. prefix)")

    # transformers >= 5 spells rope_scaling as rope_parameters (with rope_type).
    if cfg.get("rope_scaling") is None and isinstance(cfg.get("rope_parameters"), dict):
        rp = dict(cfg["rope_parameters"])
        if "rope_theta" in rp and "rope_theta" not in cfg:
            cfg["rope_theta"] = rp["rope_theta"]
        if rp.get("rope_type", rp.get("type", "default")) not in ("default", None):
            cfg["rope_scaling"] = rp

    missing = [k for k in _REQUIRED_KEYS if k not in cfg]
    if missing:
        raise KeyError("config is missing required keys: %s" % missing)
    for k, v in _CONFIG_DEFAULTS.items():
        if k not in cfg:
            print("warning: config has no %r, using %r" % (k, v), file=sys.stderr)
            cfg[k] = v
    if cfg["hidden_act"] != "silu":
        raise ValueError("only hidden_act silu is supported, got %r" % cfg["hidden_act"])
    return cfg, prefix


# ---------------------------------------------------------------------------
# Rotary embedding (plain and YaRN), as HF DeepseekV3(Yarn)RotaryEmbedding
# ---------------------------------------------------------------------------

def yarn_get_mscale(scale, mscale):
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def _yarn_correction_dim(num_rotations, dim, base, orig_max_pos):
    # Dimension index at which the wavelength makes `num_rotations` turns over
    # the original context.
    return (dim * math.log(orig_max_pos / (num_rotations * 2 * math.pi))) / (2 * math.log(base))


def _yarn_correction_range(beta_fast, beta_slow, dim, base, orig_max_pos):
    low = math.floor(_yarn_correction_dim(beta_fast, dim, base, orig_max_pos))
    high = math.ceil(_yarn_correction_dim(beta_slow, dim, base, orig_max_pos))
    return max(low, 0), min(high, dim - 1)


def _linear_ramp(low, high, n):
    if low == high:
        high += 0.001
    return torch.clamp((torch.arange(n, dtype=torch.float32) - low) / (high - low), 0.0, 1.0)


def rope_inv_freq_and_mscale(cfg):
    """Return (inv_freq [rope_dim/2] float32, cos/sin multiplier)."""
    dim = cfg["qk_rope_head_dim"]
    base = float(cfg["rope_theta"])
    exponent = torch.arange(0, dim, 2, dtype=torch.float32) / dim
    freq_extra = 1.0 / (base ** exponent)
    rs = cfg.get("rope_scaling")
    if rs is None:
        return freq_extra, 1.0
    kind = rs.get("type", rs.get("rope_type"))
    if kind != "yarn":
        raise ValueError("unsupported rope_scaling type %r (only yarn or null)" % kind)
    factor = float(rs["factor"])
    orig = rs.get("original_max_position_embeddings", 4096)
    beta_fast = rs.get("beta_fast", 32)
    beta_slow = rs.get("beta_slow", 1)
    mscale = rs.get("mscale", 1)
    mscale_all_dim = rs.get("mscale_all_dim", 0)
    freq_inter = 1.0 / (factor * base ** exponent)
    low, high = _yarn_correction_range(beta_fast, beta_slow, dim, base, orig)
    # extrapolation weight: 1 for high-frequency dims (index < low), 0 past high
    extra_weight = 1.0 - _linear_ramp(low, high, dim // 2)
    inv_freq = freq_inter * (1.0 - extra_weight) + freq_extra * extra_weight
    cs_mscale = float(yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim))
    return inv_freq, cs_mscale


def rope_cos_sin(cfg, seq_len):
    """cos, sin tables [seq_len, rope_dim/2] (already multiplied by the YaRN mscale)."""
    inv_freq, m = rope_inv_freq_and_mscale(cfg)
    t = torch.arange(seq_len, dtype=torch.float32)
    angles = torch.outer(t, inv_freq)
    return angles.cos() * m, angles.sin() * m


def apply_rope(x, cos, sin):
    """Rotate x [..., S, n_heads_or_1, rope_dim] by position.

    Pairing follows HF modeling_deepseek (and DeepSeek's complex form): the
    rope slice is de-interleaved first, so dims (2i, 2i+1) form rotation
    pair i with frequency inv_freq[i].  Output is returned in the same
    interleaved layout as the input; the layout of the rotated vector does not
    affect q.k as long as q and k use the same one.
    """
    x_even = x[..., 0::2]
    x_odd = x[..., 1::2]
    c = cos[:, None, :]
    s = sin[:, None, :]
    out_even = x_even * c - x_odd * s
    out_odd = x_odd * c + x_even * s
    return torch.stack((out_even, out_odd), dim=-1).flatten(-2)


def attention_softmax_scale(cfg):
    qk_head_dim = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
    scale = qk_head_dim ** -0.5
    rs = cfg.get("rope_scaling")
    if rs is not None:
        mscale_all_dim = rs.get("mscale_all_dim", 0)
        if mscale_all_dim:
            m = yarn_get_mscale(float(rs["factor"]), mscale_all_dim)
            scale = scale * m * m
    return scale


# ---------------------------------------------------------------------------
# Model pieces
# ---------------------------------------------------------------------------

class Weights:
    """Upcast weight access with a name prefix (cached: meant for small models)."""

    def __init__(self, tensors, prefix, dtype=torch.float32):
        self.tensors = tensors
        self.prefix = prefix
        self.dtype = dtype
        self.cache = {}

    def has(self, name):
        return (self.prefix + name) in self.tensors

    def __call__(self, name):
        if name not in self.cache:
            self.cache[name] = self.tensors.get(self.prefix + name, self.dtype)
        return self.cache[name]


def rms_norm(x, weight, eps):
    var = x.pow(2).mean(dim=-1, keepdim=True)
    return weight * (x * torch.rsqrt(var + eps))


def linear(W, name, x):
    """y = x @ W[name.weight]^T (+ bias when the checkpoint has one)."""
    y = x @ W(name + ".weight").t()
    if W.has(name + ".bias"):
        y = y + W(name + ".bias")
    return y


def swiglu_mlp(W, prefix, x):
    gate = linear(W, prefix + ".gate_proj", x)
    up = linear(W, prefix + ".up_proj", x)
    return linear(W, prefix + ".down_proj", torch.nn.functional.silu(gate) * up)


def mla_attention(W, cfg, p, x, cos, sin):
    """Naive MLA over the full sequence. x: [S, hidden]."""
    S = x.shape[0]
    H = cfg["num_attention_heads"]
    nope, rope, vdim = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    r_kv = cfg["kv_lora_rank"]
    eps = cfg["rms_norm_eps"]

    if cfg.get("q_lora_rank"):
        q_lat = linear(W, p + "q_a_proj", x)
        q_lat = rms_norm(q_lat, W(p + "q_a_layernorm.weight"), eps)
        q = linear(W, p + "q_b_proj", q_lat)
    else:
        q = linear(W, p + "q_proj", x)
    q = q.view(S, H, nope + rope)
    q_nope, q_pe = q[..., :nope], q[..., nope:]

    kv_a = linear(W, p + "kv_a_proj_with_mqa", x)          # [S, r_kv + rope]
    kv_lat, k_pe = kv_a[:, :r_kv], kv_a[:, r_kv:]
    kv_lat = rms_norm(kv_lat, W(p + "kv_a_layernorm.weight"), eps)
    kv = linear(W, p + "kv_b_proj", kv_lat).view(S, H, nope + vdim)
    k_nope, v = kv[..., :nope], kv[..., nope:]

    q_pe = apply_rope(q_pe, cos, sin)                        # [S, H, rope]
    k_pe = apply_rope(k_pe.view(S, 1, rope), cos, sin)       # [S, 1, rope], shared by heads

    qh = torch.cat([q_nope, q_pe], dim=-1).transpose(0, 1)   # [H, S, nope+rope]
    kh = torch.cat([k_nope, k_pe.expand(S, H, rope)], dim=-1).transpose(0, 1)
    vh = v.transpose(0, 1)                                   # [H, S, vdim]

    scores = (qh @ kh.transpose(1, 2)) * attention_softmax_scale(cfg)   # [H, S, S]
    future = torch.ones(S, S, dtype=torch.bool).triu(1)
    scores = scores.masked_fill(future, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = (probs @ vh).transpose(0, 1).reshape(S, H * vdim)
    return linear(W, p + "o_proj", out)


def route_tokens(cfg, logits, bias):
    """MoE routing. logits: [T, n_routed] float32. Returns (weights [T,k], indices [T,k]).

    noaux_tc: the bias-corrected score chooses groups and experts; the
    weights are the uncorrected scores of the chosen experts.  Groups not kept
    are masked with -inf (as DeepSeek inference/model.py and vLLM do; HF's
    modeling_deepseek masks with 0.0, which only differs when every kept
    candidate has a corrected score below 0).
    """
    T, E = logits.shape
    k = cfg["num_experts_per_tok"]
    if cfg["scoring_func"] == "sigmoid":
        scores = torch.sigmoid(logits)
    elif cfg["scoring_func"] == "softmax":
        scores = torch.softmax(logits, dim=-1)
    else:
        raise ValueError("unsupported scoring_func %r" % cfg["scoring_func"])

    method = cfg["topk_method"]
    n_group, topk_group = cfg["n_group"] or 1, cfg["topk_group"] or 1
    if method == "noaux_tc":
        if bias is None:
            raise KeyError("topk_method noaux_tc needs mlp.gate.e_score_correction_bias")
        choice = scores + bias[None, :]
    elif method in ("greedy", "group_limited_greedy"):
        choice = scores
    else:
        raise ValueError("unsupported topk_method %r" % method)

    if method != "greedy" and n_group > 1:
        grouped = choice.view(T, n_group, E // n_group)
        if method == "noaux_tc":
            group_score = grouped.topk(2, dim=-1).values.sum(dim=-1)
        else:
            group_score = grouped.max(dim=-1).values
        keep = group_score.topk(topk_group, dim=-1).indices
        drop = torch.ones(T, n_group, dtype=torch.bool)
        drop.scatter_(1, keep, False)
        choice = grouped.masked_fill(drop[:, :, None], float("-inf")).view(T, E)

    idx = choice.topk(k, dim=-1).indices
    w = scores.gather(1, idx)
    if k > 1 and cfg["norm_topk_prob"]:
        w = w / (w.sum(dim=-1, keepdim=True) + 1e-20)
    w = w * cfg["routed_scaling_factor"]
    return w, idx


def moe(W, cfg, p, x):
    """Routed experts + shared experts. x: [T, hidden]."""
    router_logits = x @ W(p + "gate.weight").t()
    bias = W(p + "gate.e_score_correction_bias") if W.has(p + "gate.e_score_correction_bias") else None
    weights, idx = route_tokens(cfg, router_logits, bias)
    out = torch.zeros_like(x)
    for e in sorted(set(idx.flatten().tolist())):
        tok, slot = (idx == e).nonzero(as_tuple=True)
        y = swiglu_mlp(W, p + "experts.%d" % e, x[tok])
        out.index_add_(0, tok, y * weights[tok, slot][:, None])
    if cfg.get("n_shared_experts"):
        out = out + swiglu_mlp(W, p + "shared_experts", x)
    return out


def layer_is_moe(cfg, i):
    return (cfg.get("n_routed_experts") is not None
            and i >= cfg["first_k_dense_replace"]
            and i % cfg["moe_layer_freq"] == 0)


def forward(W, cfg, ids, hidden_dump=None):
    """Logits [S, vocab] for token ids (positions 0..S-1)."""
    ids_t = torch.tensor(ids, dtype=torch.long)
    eps = cfg["rms_norm_eps"]
    emb = W("model.embed_tokens.weight")
    h = emb[ids_t]
    cos, sin = rope_cos_sin(cfg, len(ids))
    if hidden_dump is not None:
        hidden_dump.append(h.clone())
    for i in range(cfg["num_hidden_layers"]):   # layers past this are MTP; ignored
        p = "model.layers.%d." % i
        a = rms_norm(h, W(p + "input_layernorm.weight"), eps)
        h = h + mla_attention(W, cfg, p + "self_attn.", a, cos, sin)
        m = rms_norm(h, W(p + "post_attention_layernorm.weight"), eps)
        if layer_is_moe(cfg, i):
            h = h + moe(W, cfg, p + "mlp.", m)
        else:
            h = h + swiglu_mlp(W, p + "mlp", m)
        if hidden_dump is not None:
            hidden_dump.append(h.clone())
    h = rms_norm(h, W("model.norm.weight"), eps)
    if W.has("lm_head.weight"):
        head = W("lm_head.weight")
    elif cfg.get("tie_word_embeddings"):
        head = W("model.embed_tokens.weight")
    else:
        raise KeyError("no lm_head.weight and tie_word_embeddings is false")
    return h @ head.t()


def load_model(model_dir, dtype=torch.float32):
    tensors = SafetensorsDir(model_dir)
    cfg, prefix = load_model_config(model_dir, tensors)
    return Weights(tensors, prefix, dtype), cfg


# ---------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------

def parse_ids(s):
    return [int(t) for t in s.replace(" ", "").split(",") if t != ""]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="model directory (config.json + safetensors)")
    ap.add_argument("--out", required=True, help="output directory for cases.json and caseK.f32")
    ap.add_argument("--prompt-ids", action="append", required=True,
                    help="comma-separated token ids of one case; repeat for more cases")
    ap.add_argument("--dump-hidden", action="store_true",
                    help="also write caseK.hidden.f32: residual stream [num_layers+1, S, hidden] "
                         "(embedding, then after each layer; before the final norm)")
    ap.add_argument("--float64", action="store_true",
                    help="diagnostic only: compute in float64 (golden files are still written as float32)")
    args = ap.parse_args(argv)

    dtype = torch.float64 if args.float64 else torch.float32
    W, cfg = load_model(args.model, dtype)
    vocab = cfg["vocab_size"]
    os.makedirs(args.out, exist_ok=True)

    cases = []
    for k, s in enumerate(args.prompt_ids):
        ids = parse_ids(s)
        if not ids:
            raise SystemExit("empty --prompt-ids")
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise SystemExit("token ids out of range [0, %d): %s" % (vocab, bad))
        dump = [] if args.dump_hidden else None
        logits = forward(W, cfg, ids, dump)
        assert logits.shape == (len(ids), vocab)
        fname = "case%d.f32" % k
        logits.to(torch.float32).numpy().astype("<f4").tofile(os.path.join(args.out, fname))
        argmax = logits.argmax(dim=-1).tolist()
        case = {"ids": ids, "logits_file": fname, "shape": [len(ids), vocab], "argmax": argmax}
        if dump is not None:
            hname = "case%d.hidden.f32" % k
            torch.stack(dump).to(torch.float32).numpy().astype("<f4").tofile(os.path.join(args.out, hname))
            case["hidden_file"] = hname
            case["hidden_shape"] = [len(dump), len(ids), cfg["hidden_size"]]
        cases.append(case)
        print("case %d: ids=%s" % (k, ids))
        print("  argmax per position: %s" % argmax)

    with open(os.path.join(args.out, "cases.json"), "w") as f:
        json.dump({"generator": "reference/deepseek_v3_reference.py",
                   "model_config": cfg,
                   "cases": cases}, f, indent=1)
        f.write("\n")
    print("wrote %s" % os.path.join(args.out, "cases.json"))


if __name__ == "__main__":
    main()

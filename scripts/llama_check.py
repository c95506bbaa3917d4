#!/usr/bin/env python3
"""Compares fp8train's Llama (model.arch llama) with transformers' LlamaForCausalLM.

Reads the directory `fp8rt_gpt_dump --arch llama` wrote (meta.json, params.bin, grads.bin, the batch
and our logits) and its Hugging Face exports DIR/hf (F32) and DIR/hf-bf16 (BF16). Checks:
  a. LlamaForCausalLM.from_pretrained(DIR/hf) holds exactly our weights: every tensor is also set
     from params.bin through our layout (qkv = [q_proj | k_proj | v_proj], fc = [gate_proj |
     up_proj], wte and lm_head padded to Vp rows) and must equal what from_pretrained loaded; its
     float32 logits and loss on our tokens must match ours;
  b. every gradient of the mean loss against the same model run in float64 (q/k/v and gate/up
     gradients concatenated, layers stacked, padded rows of wte and lm_head: compare the first V,
     the pad rows' gradients must be exactly 0);
  c. for a bf16 dump, the same model run in bf16 gives what bf16 itself costs: ours passes within
     max(3 x that, 1e-3); for an fp8 dump the budget is 0.1 for logits and loss, 0.25 for gradients;
  d. DIR/hf-bf16 loaded in float32: logits within 5e-2 of ours (every weight rounded to bf16), and
     its weights are params.bin rounded to nearest bf16.
Budgets for an fp32 dump: 1e-4 (logits, gradients), 1e-5 (loss); all are multiplied by --tol-scale.

Usage: llama_check.py DUMP_DIR [DUMP_DIR...] [--tol-scale S]   (exit 0 when every check passes)
"""
import copy
import json
import math
import sys

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from transformers import LlamaForCausalLM


def load(d):
    meta = json.load(open(f"{d}/meta.json"))
    f32 = lambda n: np.fromfile(f"{d}/{n}", dtype=np.float32)
    i32 = lambda n: np.fromfile(f"{d}/{n}", dtype=np.int32)
    return meta, f32("params.bin"), f32("grads.bin"), i32("tokens.bin"), i32("targets.bin"), f32("logits.bin")


def dims(meta):
    L, C, NH = meta["n_layer"], meta["n_embd"], meta["n_head"]
    KV = meta.get("n_kv_head", NH)
    hd = meta.get("head_dim", C // NH)
    return L, C, NH, KV, hd, meta["ffn_hidden"], meta["vocab_size"], meta["padded_vocab"]


def shapes(meta):
    L, C, NH, KV, hd, Fh, V, Vp = dims(meta)
    return {"wte": (Vp, C), "ln1.weight": (L, C), "qkv.weight": (L, (NH + 2 * KV) * hd, C),
            "attn_proj.weight": (L, C, NH * hd), "ln2.weight": (L, C), "fc.weight": (L, 2 * Fh, C),
            "fc_proj.weight": (L, C, Fh), "lnf.weight": (C,), "lm_head.weight": (Vp, C)}


def unflatten(buf, meta, what):
    """Our tensors (name -> float32 CPU tensor) out of params.bin or grads.bin; size 0 skipped."""
    sh, out = shapes(meta), {}
    for t in meta["tensors"]:
        name, off, size = t["name"], t["offset"], t["size"]
        if size == 0:
            continue
        if name not in sh:
            raise ValueError(f"{what}: tensor {name} (size {size}) is not in the llama layout")
        if math.prod(sh[name]) != size:
            raise ValueError(f"{what}: {name} has {size} floats, the layout says {sh[name]}")
        if off + size > buf.size:
            raise ValueError(f"{what}: {name} [{off}, {off + size}) runs past the file's {buf.size} floats")
        out[name] = torch.from_numpy(buf[off:off + size].reshape(sh[name]).copy())
    missing = sorted(set(sh) - set(out))
    if missing:
        raise ValueError(f"{what}: no tensor {', '.join(missing)}")
    return out


def hf_from_ours(p, meta, v_hf):
    """transformers' parameter name -> tensor, from our tensors (v_hf: the HF vocabulary's rows)."""
    L, C, NH, KV, hd, Fh, V, Vp = dims(meta)
    q, k = NH * hd, KV * hd
    out = {"model.embed_tokens.weight": p["wte"][:v_hf], "model.norm.weight": p["lnf.weight"],
           "lm_head.weight": p["lm_head.weight"][:v_hf]}
    for l in range(L):
        pre = f"model.layers.{l}."
        qkv, fc = p["qkv.weight"][l], p["fc.weight"][l]
        out[pre + "input_layernorm.weight"] = p["ln1.weight"][l]
        out[pre + "self_attn.q_proj.weight"] = qkv[:q]
        out[pre + "self_attn.k_proj.weight"] = qkv[q:q + k]
        out[pre + "self_attn.v_proj.weight"] = qkv[q + k:]
        out[pre + "self_attn.o_proj.weight"] = p["attn_proj.weight"][l]
        out[pre + "post_attention_layernorm.weight"] = p["ln2.weight"][l]
        out[pre + "mlp.gate_proj.weight"] = fc[:Fh]
        out[pre + "mlp.up_proj.weight"] = fc[Fh:]
        out[pre + "mlp.down_proj.weight"] = p["fc_proj.weight"][l]
    return out


def ours_from_hf(h, meta):
    """Our tensors (float64 CPU, our layout, vocabulary padded to Vp with zero rows) from
    transformers' name -> tensor (weights or gradients)."""
    L, C, NH, KV, hd, Fh, V, Vp = dims(meta)
    g = lambda n: h[n].detach().to("cpu", torch.float64)
    lay = lambda s: [g(f"model.layers.{l}.{s}") for l in range(L)]
    pad = lambda t: torch.cat([t, t.new_zeros(Vp - t.shape[0], t.shape[1])]) if t.shape[0] < Vp else t
    att = lambda s: lay(f"self_attn.{s}_proj.weight")
    mlp = lambda s: lay(f"mlp.{s}_proj.weight")
    return {"wte": pad(g("model.embed_tokens.weight")),
            "ln1.weight": torch.stack(lay("input_layernorm.weight")),
            "qkv.weight": torch.stack([torch.cat(t) for t in zip(att("q"), att("k"), att("v"))]),
            "attn_proj.weight": torch.stack(att("o")),
            "ln2.weight": torch.stack(lay("post_attention_layernorm.weight")),
            "fc.weight": torch.stack([torch.cat(t) for t in zip(mlp("gate"), mlp("up"))]),
            "fc_proj.weight": torch.stack(mlp("down")),
            "lnf.weight": g("model.norm.weight"),
            "lm_head.weight": pad(g("lm_head.weight"))}


def from_pretrained(path):
    """float32 LlamaForCausalLM with eager attention; transformers 5 names the dtype `dtype`,
    4.x `torch_dtype` (4.x passes an unknown `dtype` on to the config, hence the .float())."""
    kw = {"attn_implementation": "eager"}
    try:
        model = LlamaForCausalLM.from_pretrained(path, dtype=torch.float32, **kw)
    except TypeError:
        model = LlamaForCausalLM.from_pretrained(path, torch_dtype=torch.float32, **kw)
    return model.float().eval()


def rope_theta_of(cfg):
    rp = getattr(cfg, "rope_parameters", None)  # transformers 5
    if isinstance(rp, dict) and "rope_theta" in rp:
        return rp["rope_theta"], rp.get("rope_type", rp.get("type", "default"))
    rs = getattr(cfg, "rope_scaling", None)  # 4.x
    kind = "default" if not rs else rs.get("rope_type", rs.get("type", "default"))
    return getattr(cfg, "rope_theta", None), kind


def config_mismatches(cfg, meta):
    L, C, NH, KV, hd, Fh, V, Vp = dims(meta)
    theta, kind = rope_theta_of(cfg)
    want = {"num_hidden_layers": L, "hidden_size": C, "num_attention_heads": NH,
            "num_key_value_heads": KV, "head_dim": hd, "intermediate_size": Fh, "vocab_size": V,
            "rms_norm_eps": meta.get("norm_eps", 1e-5), "tie_word_embeddings": False,
            "rope_theta": meta["rope_theta"], "rope_type": "default", "hidden_act": "silu"}
    have = {k: getattr(cfg, k, None) for k in want}
    if have["head_dim"] is None:
        have["head_dim"] = cfg.hidden_size // cfg.num_attention_heads
    have["rope_theta"], have["rope_type"] = theta, kind
    bad = []
    for k, w in want.items():
        h = have[k]
        same = (h is not None and math.isclose(float(h), float(w), rel_tol=1e-6)
                if isinstance(w, float) else h == w)
        if not same:
            bad.append(f"{k} {h!r} (meta: {w!r})")
    return bad


def rel(a, b):
    a, b = torch.as_tensor(a).double().cpu(), torch.as_tensor(b).double().cpu()
    return (torch.linalg.vector_norm(a - b) / max(torch.linalg.vector_norm(b).item(), 1e-30)).item()


def forward_loss(model, tokens, targets, V):
    logits = model(input_ids=tokens, use_cache=False).logits[..., :V]
    # Our mean cross-entropy over all B*T positions (no label shift, unlike labels=).
    flat = (logits.float() if logits.dtype == torch.bfloat16 else logits).reshape(-1, V)
    loss = F.cross_entropy(flat, targets.reshape(-1))
    return logits, loss


def run(d, tol_scale, dev):
    meta, params, grads, tok, tgt, logits = load(d)
    if meta.get("arch") != "llama":
        raise ValueError(f"meta.json arch is {meta.get('arch')!r}, not 'llama' (torch_check.py is for gpt2)")
    L, C, NH, KV, hd, Fh, V, Vp = dims(meta)
    B, T, prec = meta["B"], meta["T"], meta["precision"]
    p_ours = unflatten(params, meta, "params.bin")
    g_ours = unflatten(grads, meta, "grads.bin")
    tokens = torch.tensor(tok.reshape(B, T), dtype=torch.long, device=dev)
    targets = torch.tensor(tgt.reshape(B, T), dtype=torch.long, device=dev)
    ours_logits = torch.from_numpy(logits.reshape(B, T, -1)[..., :V].copy())
    checks = []  # (name, value, tolerance, torch bf16's value or None)

    # a. the export: config, every tensor, float32 logits and loss.
    model = from_pretrained(f"{d}/hf").to(dev)
    bad = config_mismatches(model.config, meta)
    checks.append(("hf/config.json vs meta.json" + (": " + "; ".join(bad) if bad else ""),
                   float(len(bad)), 0.0, None))
    named = dict(model.named_parameters())
    mapped = hf_from_ours(p_ours, meta, model.config.vocab_size)
    odd = sorted(set(named) ^ set(mapped)) + sorted(
        k for k in set(named) & set(mapped) if tuple(named[k].shape) != tuple(mapped[k].shape))
    diff = max(((named[k].detach().cpu() - mapped[k]).abs().max().item()
                for k in set(named) & set(mapped) if k not in odd), default=math.inf)
    checks.append(("hf/ weights == params.bin (max abs diff)" +
                   (f"; unmatched: {', '.join(odd[:6])}" if odd else ""),
                   diff if not odd else math.inf, 0.0, None))
    with torch.no_grad():
        for k in set(named) & set(mapped):
            if k not in odd:
                named[k].copy_(mapped[k])  # from params.bin, our layout, not from the export
        l32, loss32 = forward_loss(model, tokens, targets, V)

    # b. the float64 reference and its gradients.
    m64 = copy.deepcopy(model).double()
    l64, loss64 = forward_loss(m64, tokens, targets, V)
    loss64.backward()
    g64 = ours_from_hf({k: p.grad for k, p in m64.named_parameters()}, meta)
    ref_logits, ref_loss = l64.detach().cpu(), loss64.item()
    del m64

    # c. what bf16 itself costs: the same weights in a bf16 model.
    base = None
    if prec != "fp32":
        mbf = copy.deepcopy(model).to(torch.bfloat16)
        lbf, lossbf = forward_loss(mbf, tokens, targets, V)
        lossbf.backward()
        gbf = ours_from_hf({k: p.grad for k, p in mbf.named_parameters()}, meta)
        rows = lambda n, t: t[:V] if n in ("wte", "lm_head.weight") else t
        base = {"logits": rel(lbf.detach(), ref_logits),
                "loss": abs(lossbf.item() - ref_loss) / abs(ref_loss),
                "grad": {n: rel(rows(n, gbf[n]), rows(n, g64[n])) for n in g64}}
        del mbf

    def budget(kind, name=None):
        if prec == "fp32":
            return {"logits": 1e-4, "loss": 1e-5, "grad": 1e-4}[kind] * tol_scale
        b = base[kind] if kind != "grad" else base["grad"][name]
        if prec == "bf16":
            return max(3 * b, 1e-3) * tol_scale
        return {"logits": 0.1, "loss": 0.1, "grad": 0.25}[kind] * tol_scale  # fp8 (and others)

    bl = lambda kind, name=None: None if base is None else (
        base[kind] if kind != "grad" else base["grad"][name])
    checks.append(("logits vs transformers (f32)", rel(ours_logits, l32.detach()), budget("logits"), None))
    checks.append(("loss vs transformers (f32)", abs(meta["loss"] - loss32.item()) / abs(loss32.item()),
                   budget("loss"), None))
    checks.append(("logits vs transformers (f64)", rel(ours_logits, ref_logits), budget("logits"), bl("logits")))
    checks.append(("loss vs transformers (f64)", abs(meta["loss"] - ref_loss) / abs(ref_loss),
                   budget("loss"), bl("loss")))
    for n in shapes(meta):
        g, r = g_ours[n].double(), g64[n]
        if n in ("wte", "lm_head.weight"):
            checks.append((f"grad {n} [:V]", rel(g[:V], r[:V]), budget("grad", n), bl("grad", n)))
            pad = g[V:].abs().max().item() if Vp > V else 0.0
            checks.append((f"grad {n} pad rows V..Vp-1 (max abs)", pad, 0.0, None))
        else:
            checks.append((f"grad {n}", rel(g, r), budget("grad", n), bl("grad", n)))
    del model

    # d. the BF16 export, loaded in float32.
    mb = from_pretrained(f"{d}/hf-bf16").to(dev)
    named = dict(mb.named_parameters())
    worst = 0.0
    for k, want in hf_from_ours(p_ours, meta, mb.config.vocab_size).items():
        if k not in named or tuple(named[k].shape) != tuple(want.shape):
            worst = math.inf
            continue
        have = named[k].detach().cpu()
        worst = max(worst, ((have - want).abs() / want.abs().clamp(min=1e-30)).max().item())
    checks.append(("hf-bf16/ weights == params.bin rounded (max rel)", worst, 2.0 ** -8 * (1 + 1e-6), None))
    with torch.no_grad():
        lb = mb(input_ids=tokens, use_cache=False).logits[..., :V]
    tol = max(5e-2 * tol_scale, budget("logits")) if prec == "fp8" else 5e-2 * tol_scale
    checks.append(("logits of hf-bf16/ (f32) vs ours", rel(ours_logits, lb), tol, None))
    del mb

    print(f"{d}: llama L={L} C={C} NH={NH} KV={KV} hd={hd} F={Fh} V={V} (Vp {Vp}), B={B} T={T}, "
          f"precision {prec} on {meta['device']}; loss ours {meta['loss']:.6f} transformers(f64) {ref_loss:.6f}"
          f" (reference on {dev}, transformers {transformers.__version__}, torch {torch.__version__})")
    print(f"{'check':50s} {'ours':>11s} {'tolerance':>11s} {'torch bf16':>11s}")
    ok = True
    for name, e, tol, tb in checks:
        good = e <= tol  # NaN fails
        ok &= good
        tbs = f"{tb:11.3e}" if tb is not None else f"{'':11s}"
        print(f"{name:50s} {e:11.3e} {tol:11.3e} {tbs}  {'PASS' if good else 'FAIL'}")
    return ok


def main(argv):
    scale = 1.0
    if "--tol-scale" in argv:
        i = argv.index("--tol-scale")
        scale = float(argv[i + 1])
        del argv[i:i + 2]
    if not argv:
        sys.exit(__doc__)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.set_float32_matmul_precision("highest")  # no TF32 in the float32 reference
    good = True
    for d in argv:
        try:
            good &= run(d, scale, dev)
        except (OSError, ValueError, KeyError) as e:
            print(f"{d}: {type(e).__name__}: {e}  FAIL")
            good = False
    print("llama_check:", "PASS" if good else "FAIL")
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

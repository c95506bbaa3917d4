#!/usr/bin/env python3
"""Compares fp8train's model with an independent PyTorch GPT-2 implementation.

Reads the directory fp8rt_gpt_dump wrote (weights, batch, loss, logits, gradients), loads the
same weights into the PyTorch model below, and reports relative L2 errors of the logits, the loss
and every parameter gradient. The PyTorch model runs in float64 as the reference; for a bf16 dump
it also runs in bf16, so our bf16 error is judged against what bf16 itself costs.

Usage: torch_check.py DUMP_DIR [--tol-scale S]   (exit 0 when every check passes)
"""
import json
import math
import sys

import numpy as np
import torch
import torch.nn.functional as F


def load(d):
    meta = json.load(open(f"{d}/meta.json"))
    f32 = lambda n: np.fromfile(f"{d}/{n}", dtype=np.float32)
    i32 = lambda n: np.fromfile(f"{d}/{n}", dtype=np.int32)
    return meta, f32("params.bin"), i32("tokens.bin"), i32("targets.bin"), f32("logits.bin"), f32("grads.bin")


def shapes(meta):
    L, C, Vp, maxT = meta["n_layer"], meta["n_embd"], meta["padded_vocab"], meta["block_size"]
    return {"wte": (Vp, C), "wpe": (maxT, C), "ln1.weight": (L, C), "ln1.bias": (L, C),
            "qkv.weight": (L, 3 * C, C), "qkv.bias": (L, 3 * C), "attn_proj.weight": (L, C, C),
            "attn_proj.bias": (L, C), "ln2.weight": (L, C), "ln2.bias": (L, C),
            "fc.weight": (L, 4 * C, C), "fc.bias": (L, 4 * C), "fc_proj.weight": (L, C, 4 * C),
            "fc_proj.bias": (L, C), "lnf.weight": (C,), "lnf.bias": (C,)}


def gpt_forward(p, tokens, targets, meta, dtype):
    """A plain GPT-2 forward written from the paper's definitions (not from our kernels)."""
    B, T, C, NH, L, V = meta["B"], meta["T"], meta["n_embd"], meta["n_head"], meta["n_layer"], meta["vocab_size"]
    hs = C // NH
    pos = torch.arange(T, device=tokens.device)
    x = (p["wte"][tokens] + p["wpe"][pos]).to(dtype)
    w = {k: v.to(dtype) for k, v in p.items()}
    for l in range(L):
        h = F.layer_norm(x, (C,), w["ln1.weight"][l], w["ln1.bias"][l], eps=1e-5)
        qkv = h @ w["qkv.weight"][l].T + w["qkv.bias"][l]
        q, k, v = qkv.split(C, dim=-1)
        q, k, v = [t.view(B, T, NH, hs).transpose(1, 2) for t in (q, k, v)]
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ w["attn_proj.weight"][l].T + w["attn_proj.bias"][l]
        h = F.layer_norm(x, (C,), w["ln2.weight"][l], w["ln2.bias"][l], eps=1e-5)
        h = F.gelu(h @ w["fc.weight"][l].T + w["fc.bias"][l], approximate="tanh")
        x = x + h @ w["fc_proj.weight"][l].T + w["fc_proj.bias"][l]
    x = F.layer_norm(x, (C,), w["lnf.weight"], w["lnf.bias"], eps=1e-5)
    logits = x @ w["wte"].T  # (B, T, Vp)
    loss = F.cross_entropy(logits[..., :V].reshape(B * T, V).double(), targets.reshape(-1))
    return logits, loss


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def run(d, tol_scale):
    meta, params, tok, tgt, logits, grads = load(d)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    sh = shapes(meta)
    offs = {t["name"]: t for t in meta["tensors"]}

    def params_as(dtype):
        p = {}
        for name, shape in sh.items():
            o = offs[name]
            p[name] = torch.tensor(params[o["offset"]:o["offset"] + o["size"]].reshape(shape),
                                   dtype=torch.float64, device=dev).requires_grad_(True)
        return p

    tokens = torch.tensor(tok.reshape(meta["B"], meta["T"]), dtype=torch.long, device=dev)
    targets = torch.tensor(tgt.reshape(meta["B"], meta["T"]), dtype=torch.long, device=dev)
    ref_p = params_as(torch.float64)
    ref_logits, ref_loss = gpt_forward(ref_p, tokens, targets, meta, torch.float64)
    ref_loss.backward()
    ours_logits = logits.reshape(meta["B"], meta["T"], -1)
    results = []
    prec = meta["precision"]
    if prec == "fp32":
        budget = {"logits": 1e-5, "loss": 1e-5, "grad": 1e-4}
        base = {"logits": 0.0, "grad": {}}
    else:
        # What bf16 itself costs: the same PyTorch model run in bf16.
        bp = params_as(torch.float64)
        bl, bloss = gpt_forward(bp, tokens, targets, meta, torch.bfloat16)
        bloss.backward()
        base = {"logits": rel(bl.detach().float().cpu().numpy(), ref_logits.detach().cpu().numpy()),
                "loss": abs(bloss.item() - ref_loss.item()) / abs(ref_loss.item()),
                "grad": {n: rel(bp[n].grad.cpu().numpy(), ref_p[n].grad.cpu().numpy()) for n in sh}}
        budget = {"logits": 2 * base["logits"] + 1e-3, "loss": 2 * base["loss"] + 1e-3}
    budget = {k: v * tol_scale for k, v in budget.items()}
    e = rel(ours_logits, ref_logits.detach().cpu().numpy())
    results.append(("logits", e, budget["logits"]))
    e = abs(meta["loss"] - ref_loss.item()) / abs(ref_loss.item())
    results.append(("loss", e, budget["loss"]))
    for name in sh:
        o = offs[name]
        g = grads[o["offset"]:o["offset"] + o["size"]]
        e = rel(g, ref_p[name].grad.cpu().numpy().reshape(-1))
        tol = budget["grad"] if prec == "fp32" else (2 * base["grad"][name] + 1e-3) * tol_scale
        results.append((f"grad {name}", e, tol))
    ok = True
    print(f"{d}: precision {prec}, device {meta['device']}, loss ours {meta['loss']:.6f} "
          f"torch(f64) {ref_loss.item():.6f}")
    print(f"{'check':28s} {'rel L2 err':>12s} {'tolerance':>12s}")
    for name, e, tol in results:
        flag = "ok" if e <= tol else "FAIL"
        ok &= e <= tol
        print(f"{name:28s} {e:12.3e} {tol:12.3e}  {flag}")
    return ok


if __name__ == "__main__":
    args = sys.argv[1:]
    scale = 1.0
    if "--tol-scale" in args:
        i = args.index("--tol-scale")
        scale = float(args[i + 1])
        del args[i:i + 2]
    good = all(run(d, scale) for d in args)
    print("torch_check:", "PASS" if good else "FAIL")
    sys.exit(0 if good else 1)

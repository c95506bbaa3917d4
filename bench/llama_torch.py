#!/usr/bin/env python3
"""PyTorch reference throughput for Llama-3.2-1B's shape on one GPU, to set fp8train's llama
numbers against: transformers' LlamaForCausalLM (16 x 2048, 32 heads, 8 KV heads, SwiGLU 8192,
vocabulary 128256, rope_theta 500000, untied head) from random init, torch.compile, fused AdamW
(lr 3e-4, betas 0.9/0.95, weight decay 0.1 on 2-D weights, as fp8train), gradient clipping 1.0,
synthetic random tokens, SDPA flash attention.

  bf16: PyTorch AMP, as the GPT references in docs/PERFORMANCE.md and FP8_NOTES.md: FP32
        parameters, gradients and AdamW moments, the forward under torch.autocast(bfloat16).
  fp8:  the same, with every linear layer of the decoder blocks (q/k/v/o, gate/up/down) through
        torch._scaled_mm with per-tensor current scaling ("tensorwise"): E4M3 inputs and weights
        forward, E5M2 output gradients in the dgrad and wgrad GEMMs; the LM head stays BF16.

The causal mask: transformers builds a full (B, 1, T, T) mask whenever torch.compile traces the
model, and SDPA cannot use flash attention with a mask; this script makes create_causal_mask
return None (the batch has no padding), so SDPA runs with is_causal=True, and by default allows
only the flash backend (--sdpa any to let PyTorch choose).

Each step is timed between two cuda synchronizes; tokens/s and step ms are medians over the steps
after --warmup (the first, compiling ones). Peak memory is torch.cuda.max_memory_allocated (the
allocator's maximum, not the device memory in use that fp8train reports). MFU: tokens/s x (6N +
12 L C T) / 989 TFLOP/s (N: parameters less the input embedding, a lookup), as
bench/train_summary.py.

Usage: llama_torch.py [--precision bf16|fp8] [--batch 4] [--seq 2048] [--steps 20] [--warmup 5]
                      [--layers 16] [--compile|--no-compile] [--sdpa flash|any] [--seed 1234]
"""
import argparse
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import transformers
from transformers import LlamaConfig, LlamaForCausalLM

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
PEAK_BF16_FLOPS = 989e12


def to_fp8(x, dtype):
    """Per-tensor current scaling: (codes, 1/scale) with scale = fp8 max / amax(x)."""
    fmax = torch.finfo(dtype).max
    amax = x.detach().abs().amax().float().clamp(min=1e-12)
    scale = fmax / amax
    return (x.float() * scale).clamp(-fmax, fmax).to(dtype), scale.reciprocal()


class Fp8Matmul(torch.autograd.Function):
    """y = x w^T with x (M, K) and w (N, K) cast to E4M3; dx = dy w and dw = dy^T x with dy in
    E5M2. torch._scaled_mm wants its first operand row-major and its second column-major."""

    @staticmethod
    def forward(ctx, x, w):
        xq, xs = to_fp8(x, E4M3)
        wq, ws = to_fp8(w, E4M3)
        ctx.save_for_backward(xq, xs, wq, ws)
        ctx.x_dtype, ctx.w_dtype = x.dtype, w.dtype
        return torch._scaled_mm(xq, wq.t(), scale_a=xs, scale_b=ws, out_dtype=torch.bfloat16,
                                use_fast_accum=True)

    @staticmethod
    def backward(ctx, dy):
        xq, xs, wq, ws = ctx.saved_tensors
        gq, gs = to_fp8(dy, E5M2)
        dx = torch._scaled_mm(gq, wq.t().contiguous().t(), scale_a=gs, scale_b=ws,
                              out_dtype=torch.bfloat16, use_fast_accum=False)
        dw = torch._scaled_mm(gq.t().contiguous(), xq.t().contiguous().t(), scale_a=gs, scale_b=xs,
                              out_dtype=torch.float32, use_fast_accum=False)
        return dx.to(ctx.x_dtype), dw.to(ctx.w_dtype)


class Fp8Linear(nn.Module):
    """Drop-in for a bias-free nn.Linear; keeps the same FP32 weight Parameter."""

    def __init__(self, lin):
        super().__init__()
        assert lin.bias is None, "Fp8Linear: the decoder's linear layers have no bias"
        self.in_features, self.out_features = lin.in_features, lin.out_features
        self.weight = lin.weight

    def forward(self, x):
        y = Fp8Matmul.apply(x.reshape(-1, self.in_features), self.weight)
        return y.view(*x.shape[:-1], self.out_features)


def fp8_decoder_linears(model):
    n = 0
    for layer in model.model.layers:
        for parent in list(layer.modules()):
            for name, child in list(parent.named_children()):
                if isinstance(child, nn.Linear):
                    if child.in_features % 16 or child.out_features % 16:
                        sys.exit(f"llama_torch: {name} is {child.out_features} x {child.in_features}; "
                                 "torch._scaled_mm needs multiples of 16")
                    setattr(parent, name, Fp8Linear(child))
                    n += 1
    return n


def no_causal_mask():
    """transformers materialises the causal mask while torch.compile traces; without padding the
    mask is exactly SDPA's is_causal=True, so let the model pass None."""
    try:
        from transformers.models.llama import modeling_llama
    except ImportError:
        return False
    if not hasattr(modeling_llama, "create_causal_mask"):
        return False
    modeling_llama.create_causal_mask = lambda *args, **kwargs: None
    return True


def flash_only():
    """Allow SDPA's flash backend only, if it takes this model's GQA causal attention."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q = torch.randn(1, 4, 256, 64, device="cuda", dtype=torch.bfloat16)
    kv = torch.randn(1, 1, 256, 64, device="cuda", dtype=torch.bfloat16)
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            F.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True)
            F.scaled_dot_product_attention(q, q, q, is_causal=True)
    except RuntimeError as e:
        print(f"llama_torch: flash attention refused a test call ({str(e).splitlines()[0]}); "
              "SDPA chooses its backend", file=sys.stderr)
        return False
    torch.backends.cuda.enable_mem_efficient_sdp(False)
    torch.backends.cuda.enable_math_sdp(False)
    if hasattr(torch.backends.cuda, "enable_cudnn_sdp"):
        torch.backends.cuda.enable_cudnn_sdp(False)
    return True


def build(a):
    cfg = LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                      num_hidden_layers=a.layers, num_attention_heads=32, num_key_value_heads=8,
                      head_dim=64, hidden_act="silu", max_position_embeddings=2048, rms_norm_eps=1e-5,
                      rope_theta=500000.0,  # transformers 5 moves it into rope_parameters
                      tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
                      attention_dropout=0.0, use_cache=False)
    with torch.device("cuda"):
        model = LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa")
    model = model.float().train()
    # The config is what we asked for: RoPE's inverse frequencies of theta 500000, untied head.
    inv = model.model.rotary_emb.inv_freq.float().cpu()
    want = 1.0 / (500000.0 ** (torch.arange(0, 64, 2, dtype=torch.float32) / 64))
    if not torch.allclose(inv, want, rtol=1e-5) or model.lm_head.weight is model.model.embed_tokens.weight:
        sys.exit("llama_torch: the model's RoPE frequencies or head tying are not Llama-3.2-1B's")
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--precision", choices=["bf16", "fp8"], default="bf16")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=20, help="all steps, warm-up included")
    ap.add_argument("--warmup", type=int, default=5, help="first steps left out of the medians")
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--sdpa", choices=["flash", "any"], default="flash")
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    if a.steps <= a.warmup:
        sys.exit("llama_torch: --steps must exceed --warmup")
    if a.precision == "fp8" and (a.batch * a.seq) % 16:
        sys.exit("llama_torch: fp8 needs batch x seq a multiple of 16 (torch._scaled_mm)")
    if a.seq > 2048:
        sys.exit("llama_torch: --seq at most 2048 (max_position_embeddings)")
    torch.manual_seed(a.seed)
    B, T = a.batch, a.seq

    masked = no_causal_mask()
    flash = a.sdpa == "flash" and flash_only()
    model = build(a)
    V, L, C = model.config.vocab_size, model.config.num_hidden_layers, model.config.hidden_size
    n_params = sum(p.numel() for p in model.parameters())
    n_flops = n_params - model.model.embed_tokens.weight.numel()
    n_fp8 = fp8_decoder_linears(model) if a.precision == "fp8" else 0

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)

    def loss_fn(x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=x, use_cache=False).logits
        return F.cross_entropy(logits.float().reshape(-1, V), y.reshape(-1))

    step_loss = torch.compile(loss_fn) if a.compile else loss_fn
    gen = torch.Generator(device="cuda").manual_seed(a.seed)

    print(f"llama_torch: torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.cuda.get_device_name()}; L={L} C={C} heads 32/8 F=8192 V={V}, "
          f"{n_params / 1e6:.1f}M parameters; B={B} T={T}; {a.precision}"
          f"{f' ({n_fp8} FP8 linear layers)' if n_fp8 else ''}; compile {a.compile}; attention "
          f"{'flash only' if flash else 'SDPA chooses'}{'' if masked else ' (transformers builds a mask)'}")
    losses, times = [], []
    for step in range(a.steps):
        toks = torch.randint(0, V, (B, T + 1), device="cuda", generator=gen)
        x, y = toks[:, :-1].contiguous(), toks[:, 1:].contiguous()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = step_loss(x, y)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        losses.append(loss.item())
        times.append(dt)
        print(f"step {step + 1:3d}/{a.steps} loss {losses[-1]:.4f} norm {norm.item():.3f} "
              f"{1000 * dt:8.1f} ms {B * T / dt:10,.0f} tok/s", flush=True)
        if not math.isfinite(losses[-1]):
            sys.exit("llama_torch: the loss is not finite")

    timed = times[a.warmup:]
    tok_s = statistics.median(B * T / t for t in timed)
    step_ms = 1000 * statistics.median(timed)
    mfu = tok_s * (6 * n_flops + 12 * L * C * T) / PEAK_BF16_FLOPS
    peak = torch.cuda.max_memory_allocated() / 2**30
    print("| run | precision | steps timed | median tok/s | median step ms | MFU | peak allocated GiB "
          "| first loss | final loss |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| torch llama-1b L{L} B{B} T{T} | {a.precision} | {len(timed)} | {tok_s:,.0f} | {step_ms:.1f} | "
          f"{100 * mfu:.1f}% | {peak:.1f} | {losses[0]:.4f} | {losses[-1]:.4f} |")


if __name__ == "__main__":
    main()

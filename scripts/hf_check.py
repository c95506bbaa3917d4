#!/usr/bin/env python3
"""Loads fp8train's Hugging Face export with transformers and compares its logits with ours.

Reads the directory fp8rt_gpt_dump wrote: the batch and our logits (logits.bin, fp32 on the
device it ran on), and DUMP_DIR/hf and DUMP_DIR/hf-bf16 (model.safetensors + config.json written
by runtime/huggingface.cc, F32 and BF16). transformers' GPT2LMHeadModel.from_pretrained loads each
with no conversion code; its float32 logits on the same tokens must match ours (relative L2 error
<= 1e-4 for F32 weights; <= 5e-2 for BF16 weights, which round every weight to 8 bits).

Usage: hf_check.py DUMP_DIR   (exit 0 when both pass)
"""
import json
import sys

import numpy as np
import torch
from transformers import GPT2LMHeadModel


def main(d):
    meta = json.load(open(f"{d}/meta.json"))
    B, T, V, Vp = meta["B"], meta["T"], meta["vocab_size"], meta["padded_vocab"]
    tokens = torch.from_numpy(np.fromfile(f"{d}/tokens.bin", dtype=np.int32).astype(np.int64)).view(B, T)
    ours = torch.from_numpy(np.fromfile(f"{d}/logits.bin", dtype=np.float32)).view(B, T, Vp)[..., :V]
    ok = True
    for sub, tol in (("hf", 1e-4), ("hf-bf16", 5e-2)):
        model = GPT2LMHeadModel.from_pretrained(f"{d}/{sub}", torch_dtype=torch.float32)
        model.eval()
        with torch.no_grad():
            theirs = model(tokens).logits.float()
        err = ((theirs - ours).norm() / ours.norm()).item()
        good = err <= tol
        ok &= good
        print(f"{sub}: GPT2LMHeadModel logits vs fp8train's ({meta['precision']} on {meta['device']}): "
              f"relative L2 error {err:.2e} (tolerance {tol:g}) {'PASS' if good else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

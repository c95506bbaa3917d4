#!/usr/bin/env python3
"""Plots FP8 vs BF16 loss curves from two fp8train metrics files and checks the final-loss gap.
Usage: fp8_vs_bf16.py BF16.jsonl FP8.jsonl OUT.png [--window 100] [--max-gap 0.015]"""
import gzip
import json
import sys


def load(p):
    """(steps, losses) of an fp8train metrics file, plain or gzipped."""
    opener = gzip.open if p.endswith(".gz") else open
    try:
        with opener(p, "rt") as f:
            rows = [json.loads(l) for l in f if l.strip()]
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"fp8_vs_bf16: cannot read metrics file {p}: {e}")
    rows = [r for r in rows if "loss" in r]
    if not rows:
        sys.exit(f"fp8_vs_bf16: {p} has no step with a loss (did the run fail? see its log)")
    return [r["step"] for r in rows], [r["loss"] for r in rows]


def smooth(v, w):
    out, acc = [], 0.0
    for i, x in enumerate(v):
        acc += x
        if i >= w:
            acc -= v[i - w]
        out.append(acc / min(i + 1, w))
    return out


def main(a):
    if len(a) < 3:
        sys.exit(__doc__)
    window, gap_max = 100, 0.015
    if "--window" in a:
        window = int(a[a.index("--window") + 1])
    if "--max-gap" in a:
        gap_max = float(a[a.index("--max-gap") + 1])
    sb, lb = load(a[0])
    sf, lf = load(a[1])
    fb = sum(lb[-window:]) / len(lb[-window:])
    ff = sum(lf[-window:]) / len(lf[-window:])
    gap = (ff - fb) / fb
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        plt = None
        print(f"fp8_vs_bf16: no matplotlib here, {a[2]} not drawn", file=sys.stderr)
    if plt is not None:
        plot(plt, sb, lb, fb, sf, lf, ff, gap, a[2])
    print(f"steps bf16 {sb[-1]} fp8 {sf[-1]}; final loss (mean of last {window}) bf16 {fb:.4f} "
          f"fp8 {ff:.4f}; gap {100 * gap:+.2f}% (limit {100 * gap_max:.1f}%): "
          f"{'PASS' if abs(gap) <= gap_max else 'FAIL'}")


def plot(plt, sb, lb, fb, sf, lf, ff, gap, out):
    plt.figure(figsize=(8, 5))
    plt.plot(sb, smooth(lb, 20), label=f"bf16 (final {fb:.4f})")
    plt.plot(sf, smooth(lf, 20), label=f"fp8 delayed scaling (final {ff:.4f})")
    plt.xlabel("step")
    plt.ylabel("training loss (20-step moving average)")
    plt.title(f"gpt2-124m, FP8 vs BF16, same data and seed: final gap {100 * gap:+.2f}%")
    plt.legend()
    plt.grid(alpha=0.3)
    plt.savefig(out, dpi=120, bbox_inches="tight")


if __name__ == "__main__":
    main(sys.argv[1:])

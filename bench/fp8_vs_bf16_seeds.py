#!/usr/bin/env python3
"""FP8 vs BF16 over several seeds: reads DIR/conv_bf16_seedS.jsonl[.gz] and
DIR/conv_fp8_seedS.jsonl[.gz] (scripts/converge-seeds.sh), prints each seed's final-loss gap (mean
of the last WINDOW steps, as bench/fp8_vs_bf16.py) and their mean, and draws OUT.png: the loss
curves of every seed and the gap per seed.
Usage: fp8_vs_bf16_seeds.py DIR OUT.png [--window 100] [--max-gap 0.015] [--variant fp8]"""
import glob
import os
import re
import sys

from fp8_vs_bf16 import load, smooth  # same directory


def find(d, variant, seed):
    for ext in (".jsonl", ".jsonl.gz"):
        p = os.path.join(d, f"conv_{variant}_seed{seed}{ext}")
        if os.path.exists(p):
            return p
    return None


def main(a):
    if len(a) < 2:
        sys.exit(__doc__)
    d, out = a[0], a[1]
    window, gap_max, variant = 100, 0.015, "fp8"
    if "--window" in a:
        window = int(a[a.index("--window") + 1])
    if "--max-gap" in a:
        gap_max = float(a[a.index("--max-gap") + 1])
    if "--variant" in a:
        variant = a[a.index("--variant") + 1]
    seeds = sorted({m.group(1) for p in glob.glob(os.path.join(d, "conv_bf16_seed*.jsonl*"))
                    for m in [re.search(r"seed(\d+)\.jsonl", p)] if m}, key=int)
    runs = []
    for s in seeds:
        pf = find(d, variant, s)
        if pf is None:
            continue
        sb, lb = load(find(d, "bf16", s))
        sf, lf = load(pf)
        fb = sum(lb[-window:]) / len(lb[-window:])
        ff = sum(lf[-window:]) / len(lf[-window:])
        runs.append((s, sb, lb, sf, lf, fb, ff, (ff - fb) / fb))
    if not runs:
        sys.exit(f"fp8_vs_bf16_seeds: no seed in {d} has both a bf16 and a {variant} run")
    print("| seed | bf16 final | fp8 final | gap |")
    print("|---|---:|---:|---:|")
    for s, _, _, _, _, fb, ff, g in runs:
        print(f"| {s} | {fb:.4f} | {ff:.4f} | {100 * g:+.2f}% |")
    gaps = [r[7] for r in runs]
    mean = sum(gaps) / len(gaps)
    mean_b = sum(r[5] for r in runs) / len(runs)
    mean_f = sum(r[6] for r in runs) / len(runs)
    within = sum(abs(g) <= gap_max for g in gaps)
    print(f"| mean of {len(runs)} | {mean_b:.4f} | {mean_f:.4f} | {100 * mean:+.2f}% |")
    print(f"{within} of {len(runs)} seeds within {100 * gap_max:.1f}%; mean gap {100 * mean:+.2f}%; "
          f"worst FP8-behind gap {100 * max(gaps):+.2f}%")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"fp8_vs_bf16_seeds: no matplotlib here, {out} not drawn", file=sys.stderr)
        return
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [2, 1]})
    for i, (s, sb, lb, sf, lf, _, _, _) in enumerate(runs):
        ax.plot(sb, smooth(lb, 50), color="tab:blue", alpha=0.5, lw=1,
                label="bf16" if i == 0 else None)
        ax.plot(sf, smooth(lf, 50), color="tab:orange", alpha=0.5, lw=1,
                label=f"{variant} delayed scaling" if i == 0 else None)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (50-step moving average)")
    ax.set_ylim(0.8, 3.0)
    ax.set_title(f"gpt2-124m, {len(runs)} seeds, same data and seed per pair")
    ax.legend()
    ax.grid(alpha=0.3)
    bx.bar([r[0] for r in runs], [100 * g for g in gaps], color="tab:orange")
    bx.axhline(100 * gap_max, color="red", ls="--", lw=1)
    bx.axhline(-100 * gap_max, color="red", ls="--", lw=1)
    bx.axhline(100 * mean, color="black", lw=1, label=f"mean {100 * mean:+.2f}%")
    bx.set_xlabel("seed")
    bx.set_ylabel(f"final loss gap, ({variant} - bf16) / bf16, %")
    bx.set_title(f"mean of the last {window} steps")
    bx.legend()
    bx.grid(alpha=0.3, axis="y")
    fig.savefig(out, dpi=110, bbox_inches="tight")


if __name__ == "__main__":
    main(sys.argv[1:])

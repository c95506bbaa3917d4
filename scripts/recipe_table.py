#!/usr/bin/env python3
"""The recipe table and plot from scripts/recipes.sh's metrics (DIR/<recipe>_s<seed>.jsonl).

Per recipe (mean, and worst over seeds where it matters): median tokens/s (steps 10..end), peak
device memory (device_used_gib), final val loss and its gap to BF16's, and time to target: the
training wall time (the sum of step_ms; evaluations excluded, the same for every recipe) until
the smoothed val loss (mean of the last 3 evaluations) first reaches BF16's final smoothed val
loss, linearly interpolated between evaluations, as a ratio to BF16's own time (BF16 reaches it
at its last evaluation). Writes the markdown
table to stdout and DIR/recipes.svg (val loss against training wall time, one line per run).
Usage: recipe_table.py DIR
"""
import glob
import json
import os
import statistics
import sys

COLORS = {"bf16": "#444444", "delayed": "#1f77b4", "current": "#d62728", "block": "#2ca02c"}


def load(path):
    steps, vals, t = {}, [], 0.0
    for line in open(path):
        j = json.loads(line)
        if "tokens_per_s" in j:
            t += j["step_ms"] / 1e3
            steps[j["step"]] = (t, j["tokens_per_s"], j.get("device_used_gib", float("nan")))
        elif "val_loss" in j:
            vals.append((j["step"], steps.get(j["step"], (t,))[0], j["val_loss"]))
    return steps, vals


def smoothed(vals, k=3):
    return [(s, t, statistics.mean(v for _, _, v in vals[max(0, i - k + 1):i + 1]))
            for i, (s, t, _) in enumerate(vals)]


def time_to(vals, target):
    sm = smoothed(vals)
    for i, (_, t, v) in enumerate(sm):
        if v <= target:
            if i == 0:
                return t
            _, t0, v0 = sm[i - 1]
            return t0 + (t - t0) * (v0 - target) / (v0 - v)
    return None


def main():
    d = sys.argv[1]
    runs = {}
    for p in sorted(glob.glob(os.path.join(d, "*_s*.jsonl"))):
        recipe, seed = os.path.basename(p)[:-6].rsplit("_s", 1)
        steps, vals = load(p)
        if steps and vals:
            runs.setdefault(recipe, {})[seed] = (steps, vals)
    if "bf16" not in runs:
        print("recipe_table: no bf16 run to compare with", file=sys.stderr)
        return 1
    order = [r for r in ("bf16", "delayed", "current", "block") if r in runs]
    order += [r for r in runs if r not in order]
    bf = runs["bf16"]
    print("| recipe | seeds | tokens/s (median) | peak device memory | final val loss (mean / worst) "
          "| gap to BF16 (mean / worst) | time to BF16's final smoothed val loss | vs BF16 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in order:
        tps, mem, fin, gaps, ttt, ratios = [], [], [], [], [], []
        for seed, (steps, vals) in runs[r].items():
            ks = sorted(steps)[9:] or sorted(steps)
            tps.append(statistics.median(steps[k][1] for k in ks))
            mem.append(max(steps[k][2] for k in steps))
            fin.append(vals[-1][2])
            base = bf.get(seed) or next(iter(bf.values()))
            gaps.append((vals[-1][2] - base[1][-1][2]) / base[1][-1][2])
            target = smoothed(base[1])[-1][2]
            t, tb = time_to(vals, target), time_to(base[1], target)
            ttt.append(t)
            ratios.append(t / tb if t is not None and tb else None)
        ok = [x for x in ratios if x is not None]
        reached = [x for x in ttt if x is not None]
        row = [r, str(len(fin)), f"{statistics.median(tps):,.0f}", f"{max(mem):.1f} GiB",
               f"{statistics.mean(fin):.4f} / {max(fin):.4f}",
               f"{100 * statistics.mean(gaps):+.2f}% / {100 * max(gaps):+.2f}%",
               f"{statistics.mean(reached):.1f} s" if reached else "not reached",
               f"{statistics.mean(ok):.3f}x" if len(ok) == len(ratios)
               else f"not reached in {len(ratios) - len(ok)} of {len(ratios)} seeds"]
        print("| " + " | ".join(row) + " |")
    # The plot: val loss against training wall time, one polyline per run.
    W, H, L, B = 720, 420, 60, 40
    pts = [(t, v) for r in runs.values() for _, (_, vals) in r.items() for _, t, v in vals]
    tmax = max(t for t, _ in pts)
    vmin, vmax = min(v for _, v in pts), min(max(v for _, v in pts), min(v for _, v in pts) + 1.5)
    def xy(t, v):
        v = min(v, vmax)
        return L + (W - L - 20) * t / tmax, 20 + (H - B - 20) * (vmax - v) / (vmax - vmin)
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<line x1="{L}" y1="{H - B}" x2="{W - 20}" y2="{H - B}" stroke="black"/>',
           f'<line x1="{L}" y1="20" x2="{L}" y2="{H - B}" stroke="black"/>',
           f'<text x="{W / 2}" y="{H - 8}" text-anchor="middle">training wall time (s)</text>',
           f'<text x="14" y="{H / 2}" transform="rotate(-90 14 {H / 2})" text-anchor="middle">val loss (nats/byte)</text>']
    for i in range(5):
        t = tmax * i / 4
        x, _ = xy(t, vmin)
        svg.append(f'<text x="{x:.0f}" y="{H - B + 15}" text-anchor="middle">{t:.0f}</text>')
        v = vmin + (vmax - vmin) * i / 4
        _, y = xy(0, v)
        svg.append(f'<text x="{L - 5}" y="{y:.0f}" text-anchor="end">{v:.2f}</text>')
    for k, r in enumerate(order):
        for seed, (_, vals) in runs[r].items():
            line = " ".join(f"{x:.1f},{y:.1f}" for x, y in (xy(t, v) for _, t, v in vals))
            svg.append(f'<polyline fill="none" stroke="{COLORS.get(r, "#9467bd")}" stroke-width="1.5" points="{line}"/>')
        svg.append(f'<text x="{W - 140}" y="{30 + 16 * k}" fill="{COLORS.get(r, "#9467bd")}">{r}</text>')
    svg.append("</svg>")
    open(os.path.join(d, "recipes.svg"), "w").write("\n".join(svg) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

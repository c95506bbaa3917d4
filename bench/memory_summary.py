#!/usr/bin/env python3
"""The memory levers side by side: scripts/gpu-session.sh memory's runs (mem_<variant>_<precision>_<rep>.jsonl
in DIR) as two markdown tables: tokens/s (median over runs of each run's median after step 3), the
model's allocations and the device's use after step 1; then the model's memory by category, one
column per variant. Usage: bench/memory_summary.py DIR"""
import collections, glob, json, os, re, statistics, sys

GIB = 1073741824.0


def main(d):
    runs = collections.defaultdict(list)  # (variant, precision) -> [(tok/s, model GiB, device GiB, by)]
    for f in sorted(glob.glob(os.path.join(d, "mem_*_*_*.jsonl"))):
        m = re.match(r"mem_(.+)_(bf16|fp8)_(\d+)\.jsonl$", os.path.basename(f))
        if not m:
            continue
        tps, mem, losses = [], None, []
        for line in open(f):
            j = json.loads(line)
            if "memory_bytes" in j:
                mem = j
            elif "tokens_per_s" in j:
                tps.append(j["tokens_per_s"])
                losses.append(j.get("loss", float("nan")))
        if len(tps) < 5 or mem is None:
            print(f"(skipped {f}: {len(tps)} steps, memory line {'found' if mem else 'missing'})")
            continue
        runs[(m[1], m[2])].append((statistics.median(tps[3:]), mem["model_gib"],
                                   mem.get("device_used_gib", float("nan")), mem["memory_bytes"],
                                   losses[-1]))
    print("| precision | variant | runs | tokens/s (median) | vs base | model allocations | device in use | last loss |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for p in ("bf16", "fp8"):
        base = runs.get(("base", p))
        base_tps = statistics.median(r[0] for r in base) if base else float("nan")
        for (v, q), rs in sorted(runs.items(), key=lambda kv: (kv[0][0] != "base", kv[0][0])):
            if q != p:
                continue
            tps = statistics.median(r[0] for r in rs)
            print(f"| {p} | {v} | {len(rs)} | {tps:,.0f} | {tps / base_tps:.4f} | "
                  f"{rs[0][1]:.2f} GiB | {rs[0][2]:.2f} GiB | {rs[0][4]:.6f} |")
    for p in ("bf16", "fp8"):
        vs = [v for (v, q) in sorted(runs) if q == p]
        if not vs:
            continue
        vs.sort(key=lambda v: v != "base")
        cats = []
        for v in vs:
            for c in runs[(v, p)][0][3]:
                if c not in cats:
                    cats.append(c)
        print(f"\n| {p}: GiB | " + " | ".join(vs) + " |")
        print("|---|" + "---:|" * len(vs))
        for c in cats:
            print(f"| {c} | " + " | ".join(
                f"{runs[(v, p)][0][3].get(c, 0) / GIB:.3f}" for v in vs) + " |")
        print("| **total (model)** | " + " | ".join(f"**{runs[(v, p)][0][1]:.3f}**" for v in vs) + " |")
        print("| device in use | " + " | ".join(f"{runs[(v, p)][0][2]:.3f}" for v in vs) + " |")


if __name__ == "__main__":
    main(sys.argv[1])

#!/usr/bin/env python3
"""Summarises fp8train metrics files into one table: median tokens/s after warm-up, MFU, peak
device memory. Usage: train_summary.py [--warmup N] NAME=FILE.jsonl ..."""
import json
import statistics
import sys


def main(argv):
    warm = 5
    if argv[:1] == ["--warmup"]:
        warm = int(argv[1])
        argv = argv[2:]
    print("| run | precision | steps timed | median tok/s | median step ms | MFU | peak device GiB | final loss |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for spec in argv:
        name, path = spec.split("=", 1)
        rows = [json.loads(l) for l in open(path) if l.strip()]
        rows = [r for r in rows if "tokens_per_s" in r]
        timed = rows[warm:] or rows
        tok = statistics.median(r["tokens_per_s"] for r in timed)
        ms = statistics.median(r["step_ms"] for r in timed)
        mfu = statistics.median(r["mfu"] for r in timed) if timed[0].get("mfu") is not None else float("nan")
        mem = max(r.get("device_used_gib", 0) for r in rows)
        print(f"| {name} | {rows[-1]['precision']} | {len(timed)} | {tok:,.0f} | {ms:.1f} | "
              f"{100 * mfu:.1f}% | {mem:.1f} | {rows[-1]['loss']:.4f} |")


if __name__ == "__main__":
    main(sys.argv[1:])

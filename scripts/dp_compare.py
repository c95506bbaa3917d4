#!/usr/bin/env python3
"""Compares dp-determinism.sh runs (rank 0's metrics, FP8RT_STATE_HASHES=1: every rank's hashes in
rank order): for each run, the first step whose state hashes differ between ranks (replicas that
drifted); for each pair of runs with the same settings, the first step whose loss or state hashes
differ (a run that is not reproducible)."""
import json, sys

out, runs = sys.argv[1], [r.split(":") for r in sys.argv[2:]]

def load(path):
    try:
        return [j for j in map(json.loads, open(path)) if "loss" in j]
    except OSError:
        return []

data = {name: load(f"{out}/{name}.jsonl") for name, _, _ in runs}
bad = 0
for name, prec, mode in runs:
    first = next(((s["step"], [k for k, v in s["state_hash"].items() if len(set(v)) > 1])
                  for s in data[name]
                  if any(len(set(v)) > 1 for v in s.get("state_hash", {}).values())), None)
    bad += first is not None or not data[name]
    print(f"{name} ({prec}, {mode}): {len(data[name])} steps; ranks "
          + ("identical" if first is None else f"differ from step {first[0]} in {first[1]}"))
groups = {}
for name, prec, mode in runs:
    groups.setdefault((prec, mode), []).append(name)
for (prec, mode), names in groups.items():
    for other in names[1:]:
        a, b = data[names[0]], data[other]
        first = next(((x["step"], [k for k in ["loss", *x.get("state_hash", {})]
                                   if (x.get(k) if k == "loss" else x["state_hash"][k])
                                   != (y.get(k) if k == "loss" else y["state_hash"].get(k))])
                      for x, y in zip(a, b)
                      if x["loss"] != y["loss"] or x.get("state_hash") != y.get("state_hash")),
                     None)
        bad += first is not None
        print(f"{names[0]} vs {other} ({prec}, {mode}): "
              + ("identical" if first is None else f"differ from step {first[0]} in {first[1]}"))
        print("  losses:", [round(x["loss"], 6) for x in a[:6]], [round(y["loss"], 6) for y in b[:6]])
sys.exit(1 if bad else 0)

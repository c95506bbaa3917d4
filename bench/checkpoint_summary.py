#!/usr/bin/env python3
"""The checkpoint table of scripts/gpu-session.sh's `checkpoint` part: for each run (the previous
build's synchronous save, this build's synchronous and asynchronous ones) the time to the commit,
what training waited, the write throughput against the disk's own (dd), and, for the async run, the
tokens/s of the steps trained while the write ran against the steps before it."""
import json
import re
import statistics
import sys
from pathlib import Path


def lines(path):
    out = []
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def main(out_dir):
    out = Path(out_dir)
    dd = {}
    disk = out / "ckpt_disk.txt"
    if disk.exists():
        for line in disk.read_text().splitlines():
            m = re.match(r"dd 4 GiB (\S+): .* copied, ([\d.]+) s, ([\d.]+) (GB|MB)/s", line)
            if m:
                dd[m.group(1)] = float(m.group(3)) * (1 if m.group(4) == "GB" else 1e-3)
    print("| run | checkpoint | training blocked s | to commit s | GB written | write GB/s | "
          "of dd oflag=direct | tok/s before | tok/s during the write |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    # The previous build does not say how much it wrote: the same model's files, as this one's.
    same_bytes = next((l["checkpoint_bytes"] for l in lines(out / "ck_sync.jsonl")
                       if "checkpoint_bytes" in l), 0)
    for name in ("base", "sync", "async"):
        ls = lines(out / f"ck_{name}.jsonl")
        saves = [(i, l) for i, l in enumerate(ls) if "checkpoint_s" in l]
        if not saves:
            continue
        for i, s in saves:
            total = s["checkpoint_s"]
            blocked = s.get("checkpoint_blocked_s", total)
            gb = s.get("checkpoint_bytes", same_bytes) / 1e9
            ph = s.get("checkpoint_phases", {})
            io_s = ph.get("write_s", 0) + ph.get("fsync_s", 0) if ph else total
            rate = gb / io_s if gb and io_s else None
            of_dd = rate / dd["oflag=direct"] if rate and dd.get("oflag=direct") else None
            steps = [l for l in ls[:i] if "loss" in l]
            step = s["step"]
            before = [l["tokens_per_s"] for l in steps if step - 50 <= l["step"] <= step - 1]
            during = [l["tokens_per_s"] for l in steps if l["step"] > step]
            fmt = lambda v, f: (f % v) if v is not None else "-"
            print(f"| {name} | step {step} | {blocked:.3f} | {total:.2f} | {fmt(gb or None, '%.2f')} | "
                  f"{fmt(rate, '%.2f')} | {fmt(of_dd, '%.2f')} | "
                  f"{fmt(statistics.median(before) if before else None, '%.0f')} | "
                  f"{fmt(statistics.median(during) if during else None, '%.0f')} |")
            if ph:
                print(f"|  | phases: snapshot {ph.get('snapshot_s', 0):.3f} s, write "
                      f"{ph.get('write_s', 0):.2f} s, fsync {ph.get('fsync_s', 0):.2f} s, commit "
                      f"{ph.get('commit_s', 0):.2f} s; snapshot on the device: "
                      f"{s.get('snapshot_on_device')} | | | | | | | |")
    if dd:
        print()
        print("dd: " + ", ".join(f"{k} {v:.2f} GB/s" for k, v in dd.items()))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "out")

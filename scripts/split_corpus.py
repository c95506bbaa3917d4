#!/usr/bin/env python3
"""Splits a text corpus into a training and a validation file that share no byte.

Every EVERY-th block of BLOCK bytes (default: 1 in 20 blocks of 64 KiB, spread over the whole
corpus so that every source is represented) goes to the validation file, the rest to the
training file. Deterministic: the same input gives the same split.
Usage: split_corpus.py IN TRAIN_OUT VAL_OUT [--every N] [--block BYTES]
"""
import argparse
import sys


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("src")
    p.add_argument("train")
    p.add_argument("val")
    p.add_argument("--every", type=int, default=20)
    p.add_argument("--block", type=int, default=65536)
    a = p.parse_args()
    if a.every < 2 or a.block < 1:
        print("split_corpus: --every must be >= 2 and --block >= 1", file=sys.stderr)
        return 2
    data = open(a.src, "rb").read()
    blocks = [data[i:i + a.block] for i in range(0, len(data), a.block)]
    if len(blocks) < a.every:
        print(f"split_corpus: '{a.src}' has {len(data)} bytes, fewer than {a.every} blocks of "
              f"{a.block}: too small to hold out one", file=sys.stderr)
        return 1
    # Block k goes to validation when k % every == every // 2 (never the first block).
    val = b"".join(b for k, b in enumerate(blocks) if k % a.every == a.every // 2)
    train = b"".join(b for k, b in enumerate(blocks) if k % a.every != a.every // 2)
    open(a.train, "wb").write(train)
    open(a.val, "wb").write(val)
    print(f"split_corpus: {len(train)} training bytes -> {a.train}, "
          f"{len(val)} validation bytes -> {a.val}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

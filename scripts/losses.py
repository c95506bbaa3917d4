"""The loss comparisons of scripts/multigpu-session.sh's equivalence tables (imported by its
inline Python, run from the repository root)."""
import json
import os


def rows(path):
    """The metrics lines of a run that carry a loss (none when the file is missing)."""
    if not os.path.exists(path):
        return []
    return [json.loads(line) for line in open(path) if '"loss"' in line]


def rel_diff(a, b, steps=10):
    """The largest relative loss difference between two runs' rows; inf unless both have `steps`."""
    if len(a) != steps or len(b) != steps:
        return float("inf")
    return max(abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in zip(a, b))

#!/usr/bin/env python3
"""Daemon CPU-seconds per GB the replay moved, per N and target, from the files
tools/bench-nodes.sh leaves in OUT/res: each daemon's CPU (`*.meta.json`) over the bytes
its node's replay read and wrote (every phase, setup included). Printed as the median
(min-max) over nodes and runs.

Usage: tools/bench-nodes-cpu.py OUT
"""
import glob
import json
import os
import statistics
import sys


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    by = {}
    for m in glob.glob(f"{out}/res/N*-r*.meta.json"):
        meta = json.load(open(m))
        base = m[: -len(".meta.json")]
        for i, cpu in enumerate(meta.get("daemon_cpu_s") or [], 1):
            f = f"{base}-node{i}.json"
            if not os.path.exists(f):
                continue
            phases = json.load(open(f))["phases"]
            moved = sum(p["bytes_read"] + p["bytes_written"] for p in phases)
            if moved:
                by.setdefault((meta["n"], meta["target"]), []).append(cpu / (moved / 1e9))
    if not by:
        sys.exit(f"{out}/res: no daemon runs found")
    for (n, t), v in sorted(by.items()):
        print(f"N={n} {t}: {statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f}) "
              f"daemon CPU-s/GB over {len(v)} node runs")


if __name__ == "__main__":
    main()

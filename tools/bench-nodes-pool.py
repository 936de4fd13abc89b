#!/usr/bin/env python3
"""Pooled ratios of a tools/bench-nodes.sh run: for each N and target, every node-run's
median optimizer-step I/O over the same node's `direct` (fast tier alone) in the same run,
then the median (min-max) over all of them. Several OUT folders pool together. With
--warmup K the first K steps of every replay are left out (as bench-nodes.sh --warmup).

Usage: tools/bench-nodes-pool.py [--warmup K] OUT [OUT...]
"""
import glob
import json
import re
import statistics as st
import sys


args = sys.argv[1:]
warmup = 0
if args[:1] == ["--warmup"]:
    warmup, args = int(args[1]), args[2:]
if not args:
    sys.exit(__doc__)


def opt_median(path):
    j = json.load(open(path))
    v = [p["io_s"] for p in j["phases"] if p["phase"] == "optimizer"][warmup:]
    return st.median(v)


ratios = {}
for out in args:
    for f in glob.glob(f"{out}/res/N*-r*-node*.json"):
        m = re.match(r".*/N(\d+)-([\w-]+)-r(\d+)-node(\d+)\.json$", f)
        if not m or m.group(2) == "direct":
            continue
        n, tg, r, i = m.groups()
        try:
            a = opt_median(f)
            b = opt_median(f"{out}/res/N{n}-direct-r{r}-node{i}.json")
        except (OSError, ValueError, KeyError, st.StatisticsError):
            continue
        ratios.setdefault((int(n), tg), []).append(a / b)
for (n, tg), v in sorted(ratios.items()):
    v.sort()
    print(f"N={n} {tg}: {st.median(v):.2f} ({v[0]:.2f}-{v[-1]:.2f}) over {len(v)} node runs")

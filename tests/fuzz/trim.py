#!/usr/bin/env python3
"""Picks a small corpus from a libFuzzer merge control file: the seeds, then greedily the input
that adds the most coverage edges not yet covered (ties: the smaller file), until every edge is
covered or MAX files are picked. libFuzzer's own merge keeps one input per feature (edge hit
counts included), which is several times more files for the same edges.

usage: trim.py CONTROL_FILE MAX OUT_DIR  (copies the chosen files into OUT_DIR)
"""
import os
import shutil
import sys

control, limit, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
lines = open(control).read().splitlines()
count = int(lines[0])
files = lines[2 : 2 + count]
cover = {}
for line in lines[2 + count :]:
    if line.startswith("COV "):
        parts = line.split()
        cover[int(parts[1])] = set(parts[2:])
everything = set().union(*cover.values())
covered, chosen = set(), []
for index, path in enumerate(files):
    if os.path.basename(path).startswith("seed-") and index in cover:
        chosen.append(index)
        covered |= cover[index]
while len(chosen) < limit:
    best = max(
        (i for i in cover if i not in chosen),
        key=lambda i: (len(cover[i] - covered), -os.path.getsize(files[i])),
        default=None,
    )
    if best is None or not cover[best] - covered:
        break
    chosen.append(best)
    covered |= cover[best]
os.makedirs(out, exist_ok=True)
for index in chosen:
    shutil.copy(files[index], out)
print(f"{len(chosen)} files cover {len(covered)} of {len(everything)} edges")

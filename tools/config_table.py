#!/usr/bin/env python3
"""Prints the README's config reference table from `moco_dist --help`.

Usage: build/moco_dist --help | tools/config_table.py
(ConfigTest.ReadmeDocumentsEveryKey fails when a key is missing from the README.)
"""
import re
import sys

lines = sys.stdin.read().split("Config keys", 1)[1].splitlines()[1:]
for i, line in enumerate(lines):
    m = re.match(r"  (\S+) \((.*), default (.*)\)$", line)
    if m:
        print("| `%s` | %s | `%s` | %s |" % (m.group(1), m.group(2), m.group(3), lines[i + 1].strip()))

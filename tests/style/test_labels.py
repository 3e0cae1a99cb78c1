#!/usr/bin/env python3
"""The ctest entries as docs/testing.md describes them: every entry carries one tier label (unit, e2e,
mpi, multinode, interop, static); a `unit` entry runs moco_tests alone on one suite (one process, no
launcher, no shell, no Python); every suite moco_tests lists has its entry, so none goes unrun.

  test_labels.py BUILD_DIR
"""
import json
import os
import subprocess
import sys

TIERS = {"unit", "e2e", "mpi", "multinode", "interop", "static"}


def suites(moco_tests):
    listing = subprocess.run([moco_tests, "--gtest_list_tests"], capture_output=True, text=True, check=True).stdout
    names = {line.split()[0].rstrip(".") for line in listing.splitlines() if line and not line[0].isspace()}
    return {n for n in names if not n.startswith("DISABLED_")}  # as tests/gtest_suites.cmake: no entry of their own


def main():
    build = sys.argv[1]
    shown = subprocess.run(["ctest", "--test-dir", build, "--show-only=json-v1"], capture_output=True, text=True, check=True)
    tests = json.loads(shown.stdout)["tests"]
    moco_tests = os.path.join(build, "tests", "moco_tests")
    problems = []
    entries = set()
    for test in tests:
        name, command = test["name"], test.get("command", [])
        labels = set(next((p["value"] for p in test.get("properties", []) if p["name"] == "LABELS"), []))
        tiers = labels & TIERS
        if len(tiers) != 1:
            problems.append(f"{name}: labels {sorted(labels)} name {len(tiers)} tiers, not one of {sorted(TIERS)}")
        if "unit" in labels and (not command or os.path.basename(command[0]) != "moco_tests"):
            problems.append(f"{name}: a unit entry must run moco_tests itself, not {command[:1]}")
        if command and os.path.basename(command[0]) == "moco_tests" and name.endswith(".*"):
            entries.add(name[:-2])
    missing = suites(moco_tests) - entries
    problems += [f"suite {s} has no ctest entry" for s in sorted(missing)]
    for p in problems:
        print("FAIL  " + p)
    print(f"{len(tests)} entries, {len(entries)} suites, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

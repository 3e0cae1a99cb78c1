#!/usr/bin/env python3
"""No command substitution inside double quotes, an arithmetic or a parameter expansion in the
launchers, which trap signals (the stop of a run): `v=$(cmd)`, then "$v".

Bash 5.2 (Debian 12's) re-parses the text of such a substitution when it expands it and runs the
trap handlers of signals that arrived from within that parse: a signal landing there fails both the
handler's parse and the script's ("trap: line 2: unexpected EOF while looking for matching `)'"),
and the script exits 1 without its handler. Seen: moco.sh ending at a SIGTERM with its ranks still
stopping (launch.elastic_no_restart_after_stop, 2026-12-07). In a loop taking SIGTERM every 10-90 ms,
a quoted, arithmetic or parameter-expansion substitution killed bash 4 to 13 times in 40 to 60 runs;
a plain `v=$(cmd)`, `[[ $(cmd) == ... ]]` or unquoted argument none in 60 to 80.

  substitutions_unquoted.py SCRIPT...   (parsed by shfmt --to-json; exit 1 naming file:line)
"""
import json
import subprocess
import sys

# Where bash keeps the substitution's text to parse again at expansion time.
REPARSED = {"DblQuoted", "ArithmExp", "ArithmCmd", "ParamExp"}


def walk(node, inside, found):
    if isinstance(node, list):
        for item in node:
            walk(item, inside, found)
        return
    if not isinstance(node, dict):
        return
    kind = node.get("Type")
    if kind == "CmdSubst":
        if inside:
            found.append((node["Pos"]["Line"], inside))
        inside = None  # a substitution's own commands are parsed anew: what encloses it counts no more
    elif kind in REPARSED and inside is None:
        inside = kind
    for key, value in node.items():
        if key not in ("Pos", "End"):
            walk(value, inside, found)


def main():
    failures = 0
    for path in sys.argv[1:]:
        with open(path) as f:
            parsed = subprocess.run(["shfmt", "-ln", "bash", "--to-json"], stdin=f, capture_output=True, text=True)
        if parsed.returncode != 0:
            print(f"{path}: shfmt cannot parse it: {parsed.stderr.strip()}")
            failures += 1
            continue
        found = []
        walk(json.loads(parsed.stdout), None, found)
        with open(path) as f:
            lines = f.read().splitlines()
        for line, inside in sorted(set(found)):
            print(f"{path}:{line}: a command substitution inside {inside}: {lines[line - 1].strip()}")
            failures += 1
    if failures:
        print(f"{failures} substitution(s) a signal can turn into a parse error: assign each to a variable first")
        return 1
    print(f"{len(sys.argv) - 1} script(s): no command substitution bash parses again at expansion")
    return 0


if __name__ == "__main__":
    sys.exit(main())

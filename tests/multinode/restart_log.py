#!/usr/bin/env python3
"""A run's metrics.jsonl across elastic restarts (launch/mpirun/moco.sh --max-restarts, moco.sbatch):

    restart_log.py METRICS_JSONL TOTAL_STEPS RESTARTS

Checks, and exits 1 naming what fails:
  - RESTARTS {"event":"restart"} rows, each resuming (its "step") from no earlier a checkpoint than
    the last one logged before it, and no later than the last step logged (a checkpoint committed
    just before a failure may miss its row), each followed by moco_dist's "resume" row at that step;
  - every step 1..TOTAL_STEPS logged once, after the rows of a failed attempt beyond the step its
    restart resumed from are set aside (metrics_log.h: a "resume" row supersedes them); within an
    attempt no step twice;
  - the run stayed the same run: each step logged again after a restart has the lr and the epoch it
    had before, bit for bit (the schedule), and a loss within 1e-3 relative (the same data; another
    world normalises its BatchNorm groups with another rounding, docs/checkpoints.md);
  - the last row is the trained kNN.
A row cut short (its rank 0 killed while writing it) is skipped and named; a restart row written
onto it would be cut too, and missed.
Prints the restarts and the steps set aside, one line each.
"""
import json
import sys


def fail(message):
    print(f"restart_log.py: {message}", file=sys.stderr)
    sys.exit(1)


def main():
    path, total, want_restarts = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rows, cut = [], []
    for line in open(path):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a row a killed rank 0 left half-written
            cut.append(line.strip())
    if cut:
        print(f"{len(cut)} row(s) cut short, skipped: {cut}")
    restarts = [i for i, r in enumerate(rows) if r["event"] == "restart"]
    if len(restarts) != want_restarts:
        fail(f"{len(restarts)} restart rows, not {want_restarts}: {[rows[i] for i in restarts]}")
    kept = {}  # step -> the row that stands
    attempt = []  # train rows of the attempt in progress
    set_aside = []  # (row before, row after) of the steps logged again
    last_checkpoint = last_step = 0
    for i, row in enumerate(rows):
        event = row["event"]
        if event == "checkpoint":
            last_checkpoint = row["step"]
        elif event == "restart":
            if not last_checkpoint <= row["step"] <= last_step:
                fail(f"restart {row['restart']} resumed from step {row['step']}: the last checkpoint logged before "
                     f"it is step {last_checkpoint}, the last step {last_step}")
            later = [r for r in rows[i + 1:] if r["event"] in ("resume", "train")]
            if row["step"] > 0 and (not later or later[0]["event"] != "resume" or later[0]["step"] != row["step"]):
                fail(f"restart {row['restart']} is not followed by a resume from step {row['step']}")
            print(f"restart {row['restart']} of {row['max_restarts']}: hosts dropped {row['hosts_dropped']}, "
                  f"world {row['old_world']} -> {row.get('new_world', row['old_world'])}, from step {row['step']}")
        elif event == "resume":
            attempt = []
            for step in [s for s in kept if s > row["step"]]:
                set_aside.append(kept.pop(step))
        elif event == "train":
            step = row["step"]
            if attempt and step != attempt[-1]["step"] + 1:
                fail(f"step {step} follows step {attempt[-1]['step']} within one attempt")
            if step in kept:
                fail(f"step {step} logged twice without a resume between")
            attempt.append(row)
            kept[step] = row
            last_step = step
    if sorted(kept) != list(range(1, total + 1)):
        fail(f"the steps that stand are not 1..{total}: {sorted(kept)[:5]}...{sorted(kept)[-5:]} ({len(kept)})")
    worst = 0.0
    for before in set_aside:
        after = kept[before["step"]]
        if (after["lr"], after["epoch"]) != (before["lr"], before["epoch"]):
            fail(f"step {before['step']}: lr {after['lr']} epoch {after['epoch']} after the restart, "
                 f"lr {before['lr']} epoch {before['epoch']} before: the schedule moved")
        rel = abs(after["loss"] - before["loss"]) / max(abs(before["loss"]), 1e-12)
        if rel > 1e-3:
            fail(f"step {before['step']}: loss {after['loss']} after the restart, {before['loss']} before (data order?)")
        worst = max(worst, rel)
    if rows[-1]["event"] != "knn" or rows[-1]["encoder"] != "trained":
        fail(f"the run did not finish: last row {rows[-1]}")
    again = sorted(r["step"] for r in set_aside)
    print(f"steps 1..{total} each logged once; steps {again} of failed attempts set aside, logged again with the same lr "
          f"and epoch and losses within {worst:.1e} (relative)")


if __name__ == "__main__":
    main()

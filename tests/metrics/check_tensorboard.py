"""Reads a run's TensorBoard events with the `tensorboard` package and checks that every scalar
equals the matching number of metrics.jsonl (as the float32 an event holds), step for step.

Usage: python3 check_tensorboard.py OUTPUT_DIR
"""
import json
import struct
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

run = sys.argv[1]
events = EventAccumulator(f"{run}/tb", size_guidance={"scalars": 0})
events.Reload()

expected = {}
for line in open(f"{run}/metrics.jsonl"):
    r = json.loads(line)
    if r["event"] == "train":
        for key in ("loss", "lr", "img_per_s", "acc1", "acc5", "data_wait_share", "bad_steps"):
            expected.setdefault(f"train/{key}", {})[r["step"]] = r[key]
    elif r["event"] == "knn":
        expected.setdefault(f"knn/top1_{r['encoder']}", {})[r["step"]] = r["top1"]

as_float32 = lambda x: struct.unpack("f", struct.pack("f", x))[0]
tags = events.Tags()["scalars"]
assert sorted(tags) == sorted(expected), f"tags {sorted(tags)} vs metrics.jsonl {sorted(expected)}"
compared = 0
for tag, by_step in expected.items():
    got = {e.step: e.value for e in events.Scalars(tag)}
    assert sorted(got) == sorted(by_step), f"{tag}: steps {sorted(got)} vs {sorted(by_step)}"
    for step, value in by_step.items():
        assert got[step] == as_float32(value), f"{tag} step {step}: {got[step]} vs {value}"
        compared += 1
print(f"{len(tags)} tags, {compared} values equal to metrics.jsonl's")

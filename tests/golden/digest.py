"""What a run computed and how it reported it, without what moves from run to run (clocks, paths,
the host): tests/golden/golden_test.sh compares it with a recorded file.

   digest.py WORK_DIR RUN_DIR CONSOLE_FILE   (paths under WORK_DIR are written as WORK)
"""
import json
import re
import sys

work_dir, run_dir, console = sys.argv[1], sys.argv[2], sys.argv[3]
# Fields that time something: their name stays (the JSONL's fields are part of what is compared),
# their value goes.
TIMED = {"elapsed_s", "img_per_s", "data_wait_s", "data_wait_share", "seconds", "train_seconds", "bytes"}


def value(name, v):
    if name in TIMED:
        return "*"
    if isinstance(v, str):
        return json.dumps(v.replace(work_dir, "WORK"))
    return json.dumps(v)


for line in open(f"{run_dir}/metrics.jsonl"):
    row = json.loads(line)
    print("jsonl", " ".join(f"{k}={value(k, row[k])}" for k in sorted(row)))

# The lines a method and the loop write about what they compute: the model, each step, kNN, the
# linear classifier, the result. Times, rates and the ETA masked.
KEPT = re.compile(r"loss|kNN|lincls|linear probe|parameters|MoCo v3|sanity check|trained|views:")
MASKS = [
    (re.compile(r"[0-9.]+ img/s"), "* img/s"),
    (re.compile(r"data wait [0-9]+%"), "data wait *%"),
    (re.compile(r"ETA [0-9:]+"), "ETA *"),
    (re.compile(r"[0-9.]+s of training"), "*s of training"),
    (re.compile(r"[0-9.]+s\)"), "*s)"),
    (re.compile(r"extracted in [0-9.]+s"), "extracted in *s"),
    (re.compile(r"[0-9.]+s blocked"), "*s blocked"),
    (re.compile(r"[0-9.]+ threads"), "* threads"),
]
for line in open(console):
    line = line.rstrip("\n")
    m = re.match(r"(\[[^]]*\] )?\[(\w+)\] (.*)", line)
    if not m or not KEPT.search(m.group(3)):
        continue
    text = m.group(3).replace(work_dir, "WORK")
    for pattern, mask in MASKS:
        text = pattern.sub(mask, text)
    print("log", m.group(2), text)

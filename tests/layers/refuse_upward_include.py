#!/usr/bin/env python3
"""The build refuses an upward include: a room's library sees only its own room and the rooms it may
use (CMakeLists.txt, moco_room). For a few pairs, `#include "<upper>/<header>"` is preprocessed with
the include flags and definitions of a lower room's library, as compile_commands.json records them,
and must fail with "No such file"; a header of a room it may use must preprocess (positive control).
The same holds for the installed libraries a room does not link (moco_room LIBS): HDF5 outside h5,
ckpt and data, MPI outside dist.

  refuse_upward_include.py BUILD_DIR [ROOM HEADER found|refused]...   (extra cases, after the table's)
"""
import concurrent.futures
import json
import os
import shlex
import subprocess
import sys
import tempfile

# (room whose flags are used, header included, must it be found?)
CASES = [
    ("dist", "run/config.h", False),
    ("dist", "ckpt/checkpoint.h", False),
    ("dist", "dist/errors.h", True),
    ("h5", "ckpt/h5_tensor_file.h", False),
    ("h5", "data/dataset.h", False),
    ("ckpt", "data/dataset.h", False),
    ("ckpt", "h5/hdf5_basics.h", True),
    ("data", "moco_v2/moco.h", False),
    ("data", "h5/attributes.h", True),
    ("model", "data/dataset.h", False),
    ("model", "dist/errors.h", True),
    ("metrics", "run/config.h", False),
    ("eval", "run/config.h", False),
    ("eval", "data/hash.h", True),
    ("train", "lincls/lincls.h", False),
    ("train", "preempt/preemption.h", True),
    ("preempt", "dist/errors.h", False),
    ("run", "train/trainer.h", False),
    ("run", "moco_v2/moco_v2.h", False),
    ("moco_v2", "train/trainer.h", False),
    ("moco_v2", "run/method.h", True),
    ("moco_v3", "moco_v2/moco_v2.h", False),
    ("moco_v2", "moco_v3/v3_model.h", False),
    ("train", "moco_v2/moco_v2.h", False),
    ("train", "moco_v3/moco_v3.h", False),
    ("optim", "run/config.h", False),
    ("optim", "model/flat_tensors.h", True),
    ("app", "moco_v2/v2_room.h", True),
    ("moco_v3", "train/trainer.h", False),
    ("moco_v3", "run/method.h", True),
    ("lincls", "train/loop.h", True),  # the linear protocol runs on the training loop
    ("lincls", "moco_v2/moco_v2.h", False),
    ("lincls", "run/config.h", True),
    # Installed libraries, only where linked.
    ("h5", "hdf5.h", True),
    ("ckpt", "hdf5.h", True),
    ("data", "hdf5.h", True),
    ("dist", "hdf5.h", False),
    ("model", "hdf5.h", False),
    ("run", "hdf5.h", False),
    ("train", "hdf5.h", False),
    ("lincls", "hdf5.h", False),
    ("dist", "mpi.h", True),
    ("ckpt", "mpi.h", False),
    ("model", "mpi.h", False),
    ("run", "mpi.h", False),
    ("train", "mpi.h", False),
    ("lincls", "mpi.h", False),
]


def room_flags(commands, room):
    """The compiler and its -I/-isystem/-D/-std flags of one object of moco_room_<room>, or None."""
    marker = f"CMakeFiles/moco_room_{room}.dir/"
    for entry in commands:
        if marker not in entry.get("output", entry["command"]):
            continue
        args = shlex.split(entry["command"])
        kept, i = [args[0]], 1
        while i < len(args):
            a = args[i]
            if a in ("-I", "-isystem", "-D", "-iquote"):
                kept += [a, args[i + 1]]
                i += 2
                continue
            if a.startswith(("-I", "-isystem", "-D", "-std=", "-iquote")):
                kept.append(a)
            i += 1
        return kept, entry["directory"]
    return None


def preprocess(flags, directory, header):
    with tempfile.TemporaryDirectory() as empty:  # no folder of ours beside the probe
        probe = os.path.join(empty, "probe.cpp")
        with open(probe, "w") as f:
            f.write(f'#include "{header}"\n')
        # Directives only: whether the header is found is all that matters here, and it is quick.
        command = flags + ["-E", "-fdirectives-only", "-o", os.devnull, probe]
        run = subprocess.run(command, cwd=directory, capture_output=True, text=True)
    return run.returncode == 0, run.stderr


SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src")


def missing_headers():
    """Our headers a case names that are not in src/: a refused include of a missing header proves nothing."""
    return sorted({header for _, header, _ in CASES if "/" in header and not os.path.isfile(os.path.join(SOURCE, header))})


def main():
    extra = sys.argv[2:]
    CASES.extend((extra[i], extra[i + 1], extra[i + 2] == "found") for i in range(0, len(extra) - 2, 3))
    gone = missing_headers()
    for header in gone:
        print(f"FAIL  src/{header} does not exist: its case would pass without testing anything")
    build = sys.argv[1]
    with open(os.path.join(build, "compile_commands.json")) as f:
        commands = json.load(f)
    flags = {room: room_flags(commands, room) for room, _, _ in CASES}
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        runs = [pool.submit(preprocess, *flags[room], header) if flags[room] else None for room, header, _ in CASES]
    failures = 0
    for (room, header, allowed), run in zip(CASES, runs):
        if run is None:
            print(f"FAIL  no compile command of moco_room_{room} in compile_commands.json")
            failures += 1
            continue
        ok, err = run.result()
        refused = not ok and "No such file" in err and header in err
        good = ok if allowed else refused
        what = "found" if allowed else "refused"
        print(f"{'ok  ' if good else 'FAIL'}  {room}: #include \"{header}\" must be {what}")
        if not good:
            failures += 1
            print("      " + (err.strip().splitlines() or ["(preprocessed without error)"])[0])
    failures += len(gone)
    print(f"{len(CASES)} cases, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""A method is one room (issues 49, 56): outside src/<room>, no file under src/ names one method's types or
keys, but the programs' one list of methods (src/app/methods.cpp); no shared place (the launchers,
tools/, tests/cli, tests/lib, the shared rooms of src/) names a method by its model.method value (as
"v3", model.method=v3, [ "$method" = v3 ]): they read the list from the programs; and no two rooms of
src/ hold files of one name (a header and its source read as one pair).

A method's names are read from its room, so a new type or key is covered as it is written: its
namespace (moco_v2), the classes, structs and enums its headers declare, and the config keys its
room file declares (key("moco.queue_size", ...) in its *room.cpp). Prints, per method, the files outside its room
that name it; exits 1 if any is not the list.

  method_rooms.py SRC_DIR METHOD_ROOM...   (CMakeLists.txt's MOCO_METHOD_ROOMS)
"""
import pathlib
import re
import sys

src = pathlib.Path(sys.argv[1])
METHOD_ROOMS = sys.argv[2:]
if not METHOD_ROOMS or not all((src / room).is_dir() for room in METHOD_ROOMS):
    sys.exit(f"usage: method_rooms.py SRC_DIR METHOD_ROOM... (each a folder of SRC_DIR), not {sys.argv[1:]}")
THE_LIST = {"app/methods.cpp"}
# Names so plain that another room may declare its own (each room has its Settings).
COMMON = {"Settings"}


def names_of(room):
    names = {room}
    for header in (src / room).glob("*.h"):
        names.update(re.findall(r"^\s*(?:class|struct|enum class)\s+(\w+)", header.read_text(), re.M))
    names -= COMMON
    keys = []
    for source in (src / room).glob("*room.cpp"):
        keys += re.findall(r'key\("([a-z0-9_]+\.[a-z0-9_]+)"', source.read_text())
    return names, keys


def files_naming(room, names, keys):
    word = re.compile(r"\b(" + "|".join(sorted(map(re.escape, names))) + r")\b")
    key = re.compile(r"(?<![\w.])(" + "|".join(map(re.escape, keys)) + r")(?![\w])") if keys else None
    found = {}
    for path in sorted(src.rglob("*")):
        if path.suffix not in (".h", ".cpp") or path.relative_to(src).parts[0] == room:
            continue
        text = path.read_text()
        hits = set(word.findall(text)) | (set(key.findall(text)) if key else set())
        if hits:
            found[str(path.relative_to(src))] = sorted(hits)
    return found


# Where a method's name would be a second list of methods. tools/mutants.sh quotes the rooms' code.
SHARED_PLACES = ["launch", "tools", "tests/cli", "tests/lib"] + [
    f"src/{room}" for room in ("ckpt", "run", "train", "lincls", "eval", "app")]
NOT_SHARED = {"tools/mutants.sh", "src/app/methods.cpp"}


def method_name(room):
    """model.method's value for the room: its kMethod constant."""
    for header in (src / room).glob("*.h"):
        found = re.search(r'kMethod\s*=\s*"([^"]+)"', header.read_text())
        if found:
            return found.group(1)
    sys.exit(f"src/{room}: no header declares kMethod, model.method's value for it")


def places_naming(name):
    n = re.escape(name)
    pattern = re.compile(rf"""["']{n}["']|model\.method[ =:]+{n}\b|\$\{{?\w*method\w*\}}?"? *==? *"?{n}\b""")
    root = src.parent
    hits = []
    for place in SHARED_PLACES:
        for path in sorted((root / place).rglob("*")):
            rel = str(path.relative_to(root))
            if not path.is_file() or rel in NOT_SHARED or path.suffix not in (".h", ".cpp", ".sh", ".py", ".sbatch", ""):
                continue
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if pattern.search(line):
                    hits.append(f"{rel}:{number}: {line.strip()}")
    return hits


def same_names_in_two_rooms():
    rooms_of = {}
    for path in src.rglob("*"):
        if path.suffix in (".h", ".cpp"):
            rooms_of.setdefault(path.stem, set()).add(path.relative_to(src).parts[0])
    return {stem: sorted(rooms) for stem, rooms in rooms_of.items() if len(rooms) > 1}


failed = False
for room in METHOD_ROOMS:
    names, keys = names_of(room)
    found = files_naming(room, names, keys)
    outside = {f: hits for f, hits in found.items() if f not in THE_LIST}
    print(f"{room}: {len(names)} names and {len(keys)} keys; files outside the room naming it: "
          f"{len(found)} ({', '.join(sorted(found)) or 'none'})")
    for f, hits in outside.items():
        print(f"  FAIL: src/{f} names {room}'s {', '.join(hits)}")
        failed = True
for room in METHOD_ROOMS:
    name = method_name(room)
    hits = places_naming(name)
    print(f"{room}: model.method {name}; shared places naming it: {len(hits)}")
    for hit in hits:
        print(f"  FAIL: {hit} (a second list of methods: read it from the programs)")
        failed = True
for stem, rooms in sorted(same_names_in_two_rooms().items()):
    print(f"  FAIL: rooms {', '.join(rooms)} each hold a file named {stem}.*")
    failed = True
sys.exit(1 if failed else 0)

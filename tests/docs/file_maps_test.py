#!/usr/bin/env python3
"""file_maps_test.py - every source folder's README.md maps each of its files to its idea.

For core/ and each of its subfolders, shim/ and tools/: the folder has a README.md, and
every file in it (not in its subfolders, which have their own) is named there in
backquotes, as `name` or, for a header and its source, `stem.*`. A file added without a
line in its folder's map fails here, so the maps stay complete.
Usage: file_maps_test.py SOURCE_ROOT
"""
import os
import re
import sys


def folders(root):
    yield "shim"
    yield "tools"
    for dirpath, dirnames, _ in os.walk(os.path.join(root, "core")):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        yield os.path.relpath(dirpath, root)


def main():
    root = sys.argv[1]
    problems = []
    for folder in folders(root):
        path = os.path.join(root, folder)
        readme = os.path.join(path, "README.md")
        if not os.path.isfile(readme):
            problems.append(f"{folder}/ has no README.md mapping its files")
            continue
        with open(readme, encoding="utf-8") as f:
            named = set(re.findall(r"`([^`]+)`", f.read()))
        for name in sorted(os.listdir(path)):
            if name == "README.md" or not os.path.isfile(os.path.join(path, name)):
                continue
            stem = name.split(".")[0]
            if name not in named and f"{stem}.*" not in named:
                problems.append(f"{folder}/{name} is not in {folder}/README.md")
    for p in problems:
        print(p)
    print(f"file maps: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

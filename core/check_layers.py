#!/usr/bin/env python3
"""check_layers.py - the build's check that core/'s parts depend only on what they may.

Each part is a folder of core/ (core/README.md; the graph is written once, in
core/meson.build's `core_layers`). A file of part P may include, from core, only P itself
and the parts P is declared to depend on; core/base/ depends on nothing. A forbidden
include fails the build here, naming the file, the line and the rule, instead of waiting
for a review. On success it writes OUTPUT (an empty header the parts' libraries are built
after).
Usage: check_layers.py CORE_DIR OUTPUT PART=DEP,DEP... [PART=...]
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')


def main():
    core, output, specs = sys.argv[1], sys.argv[2], sys.argv[3:]
    allowed = {}
    for spec in specs:
        part, _, deps = spec.partition("=")
        allowed[part] = {d for d in deps.split(",") if d}
    problems = []
    folders = sorted(d for d in os.listdir(core) if os.path.isdir(os.path.join(core, d)))
    for part in folders:
        if part not in allowed:
            problems.append(f"core/{part}/ is not a part of core_layers (core/meson.build)")
            continue
        for dirpath, _, files in os.walk(os.path.join(core, part)):
            for name in sorted(files):
                if not name.endswith((".h", ".cpp")):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m or m.group(1) not in allowed or m.group(1) == part:
                            continue
                        if m.group(1) not in allowed[part]:
                            rel = os.path.relpath(path, os.path.dirname(core))
                            may = ", ".join(sorted(allowed[part])) or "nothing"
                            problems.append(f"{rel}:{number}: core/{part}/ may not include "
                                            f"{m.group(1)}/ (it may include {may})")
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        return 1
    with open(output, "w", encoding="utf-8") as f:
        f.write("// core's layers checked (core/check_layers.py)\n#pragma once\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

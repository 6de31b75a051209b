#!/usr/bin/env python3
"""check_layers.py - the build's check that a tree's parts depend only on what they may.

Used for core/ and for shim/. Each part is a folder of the tree (its README.md maps them;
the graph is written once, in the tree's meson.build: `core_layers`, `shim_layers`). A
file of part P may include, from the tree, only P itself and the parts P is declared to
depend on; a header at the tree's root (shim/'s serving layer) counts as the part ".",
which no folder may include unless declared. Files at the root are not checked: the root
composes the parts. A forbidden include fails the build here, naming the file, the line
and the rule, instead of waiting for a review. On success it writes OUTPUT (an empty
header the parts' libraries are built after).
Usage: check_layers.py TREE_DIR OUTPUT PART=DEP,DEP... [PART=...]
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)(/|\.h")')


def main():
    core, output, specs = sys.argv[1], sys.argv[2], sys.argv[3:]
    tree = os.path.basename(os.path.normpath(core))
    root_headers = {n[:-2] for n in os.listdir(core) if n.endswith(".h")}
    allowed = {}
    for spec in specs:
        part, _, deps = spec.partition("=")
        allowed[part] = {d for d in deps.split(",") if d}
    problems = []
    folders = sorted(d for d in os.listdir(core) if os.path.isdir(os.path.join(core, d)))
    for part in folders:
        if part not in allowed:
            problems.append(f"{tree}/{part}/ is not a part of {tree}_layers ({tree}/meson.build)")
            continue
        for dirpath, _, files in os.walk(os.path.join(core, part)):
            for name in sorted(files):
                if not name.endswith((".h", ".cpp")):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        included = m.group(1)
                        if m.group(2) != "/":  # a bare header: the root's, if the root has it
                            if included not in root_headers or os.path.exists(os.path.join(dirpath, included + ".h")):
                                continue
                            included = "."
                        elif included not in allowed or included == part:
                            continue
                        if included not in allowed[part]:
                            rel = os.path.relpath(path, os.path.dirname(os.path.normpath(core)))
                            may = ", ".join(sorted(allowed[part])) or "nothing"
                            what = f"{tree}/'s root headers" if included == "." else f"{included}/"
                            problems.append(f"{rel}:{number}: {tree}/{part}/ may not include "
                                            f"{what} (it may include {may})")
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        return 1
    with open(output, "w", encoding="utf-8") as f:
        f.write(f"// {tree}'s layers checked (core/check_layers.py)\n#pragma once\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""check_layers_test.py - core/check_layers.py, the build's rule that each part of core/
includes only the parts it may: on a small tree made here, an allowed include passes and
writes its output, a forbidden one fails naming the file, the line and the rule, and a
folder the graph does not name fails too.
Usage: check_layers_test.py SOURCE_ROOT
"""
import os
import subprocess
import sys
import tempfile


def tree(root, files):
    for path, text in files.items():
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as f:
            f.write(text)


def check(script, core, graph):
    out = os.path.join(os.path.dirname(core), "checked.h")
    if os.path.exists(out):
        os.remove(out)
    r = subprocess.run([sys.executable, script, core, out] + graph,
                       capture_output=True, text=True)
    return r.returncode, r.stderr, os.path.exists(out)


def main():
    script = os.path.join(sys.argv[1], "core", "check_layers.py")
    graph = ["base=", "stats=base", "allocator=base,stats"]
    failures = []

    def expect(what, cond, detail=""):
        if not cond:
            failures.append(f"{what}: {detail}")

    with tempfile.TemporaryDirectory() as tmp:
        core = os.path.join(tmp, "core")
        tree(core, {
            "base/device.h": "#pragma once\n#include <cstddef>\n",
            "stats/stats.h": '#pragma once\n#include "base/device.h"\n#include "stats/other.h"\n',
            "allocator/a.cpp": '#include "stats/stats.h"\n#include "base/device.h"\n',
        })
        rc, err, wrote = check(script, core, graph)
        expect("allowed includes pass", rc == 0 and wrote, f"rc={rc} stderr={err!r}")

        # stats/ may not use allocator/ (it sits below it).
        tree(core, {"stats/bad.h": '#pragma once\n\n#include "allocator/a.h"\n'})
        rc, err, wrote = check(script, core, graph)
        expect("a forbidden include fails", rc != 0 and not wrote, f"rc={rc}")
        expect("the failure names file, line and rule",
               "core/stats/bad.h:3: core/stats/ may not include allocator/ (it may include base)" in err,
               repr(err))
        os.remove(os.path.join(core, "stats/bad.h"))

        # base/ includes nothing of core's.
        tree(core, {"base/bad.h": '#include "stats/stats.h"\n'})
        rc, err, _ = check(script, core, graph)
        expect("base/ may include nothing", rc != 0 and "may include nothing" in err, repr(err))
        os.remove(os.path.join(core, "base/bad.h"))

        # A new folder must be placed in the graph first.
        tree(core, {"newpart/x.h": "#pragma once\n"})
        rc, err, _ = check(script, core, graph)
        expect("an unplaced folder fails", rc != 0 and "core/newpart/ is not a part" in err, repr(err))

    for f in failures:
        print("FAIL", f)
    print(f"check_layers: {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

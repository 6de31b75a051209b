#!/usr/bin/env python3
"""check_layers_test.py - core/check_layers.py, the build's rule that each part of core/
of shim/ and of tools/ includes only the parts it may: on a small tree made here, an allowed include
passes and writes its output, a forbidden one fails naming the file, the line and the
rule, a folder's include of a root header (shim/'s serving layer) fails, and a folder the
graph does not name fails too. And the graphs docs/architecture.md states ("core part |
may include", "shim part | may include") are the ones core/meson.build and
shim/meson.build build with (`core_layers`, `shim_layers`), and tools/README.md's
("tools part | may include") the one tools/meson.build builds with (`tools_layers`).
Usage: check_layers_test.py SOURCE_ROOT
"""
import os
import re
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


def meson_graph(root, tree_name="core"):
    """<tree>_layers of <tree>/meson.build: {part: set of parts}."""
    with open(os.path.join(root, tree_name, "meson.build"), encoding="utf-8") as f:
        text = f.read()
    body = re.search(tree_name + r"_layers = \{(.*?)\n\}", text, re.S).group(1)
    return {m.group(1): set(re.findall(r"'([a-z_.]+)'", m.group(2)))
            for m in re.finditer(r"'([a-z_]+)':\s*\[([^\]]*)\]", body)}


def doc_graph(root, tree_name="core", doc=os.path.join("docs", "architecture.md")):
    """The table "| <tree> part | may include |" of docs/architecture.md (or of doc)."""
    graph = {}
    with open(os.path.join(root, doc), encoding="utf-8") as f:
        rows = f.read().split(f"| {tree_name} part | may include |", 1)[1].splitlines()[2:]
    for row in rows:
        if not row.startswith("|"):
            break
        cells = [c.strip() for c in row.strip("|").split("|")]
        part = cells[0].strip("`/")
        graph[part] = {d.strip().strip("`/") for d in cells[1].split(",") if d.strip() != "nothing"}
    return graph


def main():
    root = sys.argv[1]
    script = os.path.join(root, "core", "check_layers.py")
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

    # shim/: a folder may not include a header of the root (the serving layer above it);
    # the root includes anything, and a folder's own bare include is its own file.
    with tempfile.TemporaryDirectory() as tmp:
        shim = os.path.join(tmp, "shim")
        sgraph = ["config=", "device=config"]
        tree(shim, {
            "shim_state.h": '#pragma once\n#include "device/table.h"\n',
            "serve.cpp": '#include "shim_state.h"\n#include "config/log.h"\n',
            "config/log.h": "#pragma once\n",
            "device/table.h": '#pragma once\n#include "config/log.h"\n#include "allocator/x.h"\n',
        })
        rc, err, wrote = check(script, shim, sgraph)
        expect("shim: allowed includes pass", rc == 0 and wrote, f"rc={rc} stderr={err!r}")
        tree(shim, {"device/bad.cpp": '#include "device/table.h"\n#include "shim_state.h"\n'})
        rc, err, _ = check(script, shim, sgraph)
        expect("shim: a folder's include of a root header fails",
               rc != 0 and "shim/device/bad.cpp:2: shim/device/ may not include shim/'s root headers" in err,
               repr(err))

    for name, least, doc in (("core", 10, os.path.join("docs", "architecture.md")),
                             ("shim", 8, os.path.join("docs", "architecture.md")),
                             ("tools", 5, os.path.join("tools", "README.md"))):
        built, stated = meson_graph(root, name), doc_graph(root, name, doc)
        expect(f"{name}/meson.build's graph was read", len(built) >= least, repr(built))
        expect(f"{doc} states the {name} graph the build checks", built == stated,
               f"{name}/meson.build {built} {doc} {stated}")

    for f in failures:
        print("FAIL", f)
    print(f"check_layers: {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""python_layouts_check.py DUMPER OFFSETS_C COMPILER...

shim/python/python_layouts.h against CPython's own headers: for each CPython 3.10 to 3.13 found on
this machine (tests/integration/python_versions.py) whose headers are installed (internal
ones included: pyenv's builds, Debian's python3.X-dev), OFFSETS_C is compiled against them
with COMPILER (as C) and run; its "field value" lines must equal what DUMPER
(python_layouts_dump) prints for that version: the table's row, or for 3.13 the layout luma
makes from the debug offsets in that interpreter's libpython. Exit 77 (skipped) when no
version could be checked; the versions checked and not are printed.
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import python_versions  # noqa: E402

TEST = "python_layouts"
MINORS = (10, 11, 12, 13)
PATHS = r"""
import os, sysconfig
v = sysconfig.get_config_vars()
lib = os.path.join(v.get("LIBDIR") or "", v.get("INSTSONAME") or "")
print(sysconfig.get_paths()["include"])
print(lib if v.get("Py_ENABLE_SHARED") and os.path.isfile(lib) else "")
"""


def fields(text):
    out = {}
    for line in text.splitlines():
        name, value = line.split()
        out[name] = int(value)
    return out


def main():
    dumper, offsets_c = sys.argv[1:3]
    compiler = sys.argv[3:]
    checked, not_checked = [], []
    with tempfile.TemporaryDirectory() as work:
        for minor, python in sorted(python_versions.find(MINORS).items()):
            label = "3.%d (%s)" % (minor, python)
            include, libpython = subprocess.run([python, "-c", PATHS], capture_output=True,
                                                text=True, check=True).stdout.splitlines()
            if not os.path.isfile(os.path.join(include, "internal", "pycore_pystate.h")):
                not_checked.append(label + ": no internal headers")
                continue
            if minor == 13 and not libpython:
                not_checked.append(label + ": no shared libpython to read the debug offsets of")
                continue
            exe = os.path.join(work, "offsets-3.%d" % minor)
            built = subprocess.run(compiler + ["-x", "c", "-I" + include,
                                               "-I" + os.path.join(include, "internal"),
                                               offsets_c, "-o", exe],
                                   capture_output=True, text=True)
            if built.returncode != 0:
                print("%s: FAILED: %s: the offsets program does not compile:\n%s"
                      % (TEST, label, built.stderr[-3000:]))
                return 1
            headers = fields(subprocess.run([exe], capture_output=True, text=True,
                                            check=True).stdout)
            dumped = subprocess.run([dumper, str(minor)] + ([libpython] if minor == 13 else []),
                                    capture_output=True, text=True)
            if dumped.returncode != 0:
                print("%s: FAILED: %s: %s" % (TEST, label, dumped.stderr.strip()))
                return 1
            luma = fields(dumped.stdout)
            if luma != headers:
                diff = sorted(set(luma) | set(headers))
                print("%s: FAILED: %s: luma's layout differs from the headers:" % (TEST, label))
                for name in diff:
                    if luma.get(name) != headers.get(name):
                        print("  %s: luma %s, headers %s" % (name, luma.get(name), headers.get(name)))
                return 1
            checked.append(label)
    missing = [m for m in MINORS if not any(c.startswith("3.%d " % m) for c in checked)]
    print("%s: checked %s; not checked: %s" % (
        TEST, "; ".join(checked) or "none",
        "; ".join(not_checked + ["3.%d (not found)" % m for m in missing
                                 if not any(n.startswith("3.%d " % m) for n in not_checked)])
        or "none"))
    return 0 if checked else 77


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""install_check.py MESON BUILD_DIR PREFIX BINDIR LIBDIR FAKE_DIR PROGRAM WORK_DIR

`meson install --destdir` of the build into a scratch directory, then the installed
`luma run` (which must find the installed libluma.so, not the build tree's) records a
stand-in program, and the installed `luma stats` reads the trace."""
import os
import shutil
import subprocess
import sys

MESON, BUILD, PREFIX, BINDIR, LIBDIR, FAKE, PROGRAM, WORK = sys.argv[1:9]
dest = os.path.join(WORK, "destdir")
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
subprocess.run([MESON, "install", "-C", BUILD, "--no-rebuild", "--quiet", "--destdir", dest],
               check=True, stdout=subprocess.DEVNULL)
root = dest + PREFIX
luma = os.path.join(root, BINDIR, "luma")
lib = os.path.join(root, LIBDIR, "libluma.so")
for f in (luma, lib):
    if not os.path.exists(f):
        sys.exit("not installed: " + f)
env = {k: v for k, v in os.environ.items() if not k.startswith("LUMA_") and k != "LD_PRELOAD"}
env["LD_LIBRARY_PATH"] = FAKE
trace = os.path.join(WORK, "installed.%p.trace")
p = subprocess.run([luma, "run", "--trace", trace, "--stats", "off", "--", PROGRAM, "loop", "100",
                    "4096"], env=env, capture_output=True, text=True, timeout=120)
if p.returncode != 0 or "written to " not in p.stderr:
    sys.exit("installed luma run failed: exit %d\n%s%s" % (p.returncode, p.stdout, p.stderr))
written = p.stderr.split("written to ")[1].split()[0]
s = subprocess.run([luma, "stats", "--json", written], capture_output=True, text=True,
                   timeout=120)
if s.returncode != 0 or '"allocations": 100' not in s.stdout:
    sys.exit("installed luma stats: exit %d\n%s%s" % (s.returncode, s.stdout[:2000], s.stderr))
print("ok: installed luma run recorded %s" % written)

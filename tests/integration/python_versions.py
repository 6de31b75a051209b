"""python_versions.py: the CPython interpreters on this machine that the Python call-site
tests (python_frames_check.py, python_frames_bindings_check.py) run under, one per minor
version, looked for in this order:

  - the Python running the test (meson's python3);
  - python3.M on PATH, if it runs (a pyenv shim of a version not selected exits non-zero);
  - pyenv's builds: $PYENV_ROOT/versions/3.M.*/bin/python3.M (PYENV_ROOT, else ~/.pyenv);
  - `uv python find 3.M` when uv is on PATH (interpreters uv already has; `find` never
    downloads one).

A version found nowhere is simply not run (the tests say which versions ran). Set
LUMA_TEST_PYTHONS to a colon-separated list of interpreters to use exactly those.
"""
import glob
import os
import shutil
import subprocess
import sys


def minor_of(python):
    """3.M's M for an interpreter that runs and is CPython 3, else None."""
    try:
        p = subprocess.run([python, "-c", "import sys, platform; print(platform."
                            "python_implementation(), *sys.version_info[:2])"],
                           capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    words = p.stdout.split()
    if p.returncode != 0 or len(words) != 3 or words[0] != "CPython" or words[1] != "3":
        return None
    return int(words[2])


def _candidates(minor):
    if sys.version_info[:2] == (3, minor):
        yield sys.executable
    yield shutil.which("python3.%d" % minor)
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    pattern = os.path.join(root, "versions", "3.%d.*" % minor, "bin", "python3.%d" % minor)
    yield from sorted(glob.glob(pattern), reverse=True)
    uv = shutil.which("uv")
    if uv:
        try:
            p = subprocess.run([uv, "python", "find", "3.%d" % minor], capture_output=True,
                               text=True, timeout=60)
            if p.returncode == 0:
                yield p.stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            pass


def find(minors):
    """{M: interpreter path} for each 3.M of `minors` found (see the module's text)."""
    found = {}
    listed = os.environ.get("LUMA_TEST_PYTHONS")
    if listed:
        for python in listed.split(":"):
            m = minor_of(python)
            if m in minors and m not in found:
                found[m] = python
        return found
    for minor in minors:
        for python in _candidates(minor):
            if python and minor_of(python) == minor:
                found[minor] = python
                break
    return found

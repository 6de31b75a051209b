"""cuda_bindings_venv.py: the virtual environment with NVIDIA's Python driver bindings
(cuda-bindings, pinned below) that the Python integration tests share (cuda_bindings_check.py,
multiprocessing_workers.py); ensure_package makes one with another package (live_check.py:
prometheus_client).

It is made with pip once under the test's work directory: a marker file names the installed
version and later runs reuse it. Tests that run at the same time share one install: a lock
file next to the venv makes the second wait for the first. When PyPI cannot be reached (or
pip has no wheel for this Python) the test prints one line saying so and exits 77, meson's
code for a skipped test.
"""
import fcntl
import os
import shutil
import subprocess
import sys
import time

PIN = "13.0.3"  # a 13.0 release: the stand-in driver reports 13000 (cuDriverGetVersion)
PACKAGE = "cuda-bindings==" + PIN
PIP_TIMEOUT_S = 10  # per network operation (pip --timeout)
INSTALL_LIMIT_S = 300  # the whole install, however slow the mirror

# Words in pip's output that mean the index could not be reached at all.
NETWORK_MARKERS = ("NewConnectionError", "Max retries exceeded", "Temporary failure in name",
                   "Name or service not known", "Network is unreachable", "ConnectTimeout",
                   "Connection refused", "ProxyError", "Read timed out", "SSLError")


def skip(test, reason):
    print("%s: skipped: %s" % (test, reason))
    sys.exit(77)


def fail(test, message):
    print("%s: FAILED: %s" % (test, message))
    sys.exit(1)


def venv_python(venv):
    return os.path.join(venv, "bin", "python")


def ensure_bindings(test, venv, base=None):
    """The venv's python, with cuda-bindings==PIN installed (installed now if needed), made
    from the interpreter `base` (default: this one). `test` names the caller in its skip
    and failure lines."""
    return ensure_package(test, venv, PACKAGE, base)


def ensure_package(test, venv, package, base=None):
    """The venv's python, with `package` (a pinned pip requirement) installed, made from the
    interpreter `base` (default: this one)."""
    os.makedirs(os.path.dirname(os.path.abspath(venv)), exist_ok=True)
    with open(venv + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
        return _ensure_locked(test, venv, package, base or sys.executable)


def _ensure_locked(test, venv, package, base):
    marker = os.path.join(venv, "luma-installed-" + package)
    python = venv_python(venv)
    if os.path.exists(marker) and os.access(python, os.X_OK):
        return python
    shutil.rmtree(venv, ignore_errors=True)  # a half-made one from an interrupted run
    started = time.monotonic()
    made = subprocess.run([base, "-m", "venv", venv], capture_output=True, text=True)
    if made.returncode != 0:
        skip(test, "python3 -m venv does not work here (%s)" % made.stderr.strip()[-200:])
    try:
        pip = subprocess.run([python, "-m", "pip", "install", "--quiet",
                              "--disable-pip-version-check", "--no-input",
                              "--timeout", str(PIP_TIMEOUT_S), "--retries", "1", package],
                             capture_output=True, text=True, timeout=INSTALL_LIMIT_S)
    except subprocess.TimeoutExpired:
        shutil.rmtree(venv, ignore_errors=True)
        skip(test, "PyPI not reachable (pip install %s took over %d s)"
             % (package, INSTALL_LIMIT_S))
    if pip.returncode != 0:
        shutil.rmtree(venv, ignore_errors=True)
        out = pip.stdout + pip.stderr
        found = [m for m in NETWORK_MARKERS if m in out]
        if found:
            skip(test, "PyPI not reachable (pip install %s: %s)" % (package, found[0]))
        if "No matching distribution" in out:
            skip(test, "no %s wheel for %s" % (package, base))
        fail(test, "pip install %s failed:\n%s" % (package, out[-3000:]))
    with open(marker, "w") as f:
        f.write("installed in %.1f s\n" % (time.monotonic() - started))
    print("%s: installed %s in %.1f s" % (test, package, time.monotonic() - started))
    return python


def skip_under_sanitizer(test, sanitize):
    """A sanitizer build skips: the preloaded, instrumented libluma.so would need its
    runtime loaded first into an uninstrumented Python."""
    if sanitize not in ("", "none"):
        skip(test, "sanitizer build (b_sanitize=%s): python is not instrumented" % sanitize)


def stand_in_env(fake_dir, dropped=()):
    """This environment without LD_PRELOAD, LUMA_* and `dropped`, the stand-in driver first
    on LD_LIBRARY_PATH (whatever this Python itself needs stays behind it)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("LUMA_") and k != "LD_PRELOAD" and k not in dropped}
    env["LD_LIBRARY_PATH"] = ":".join(
        p for p in (fake_dir, os.environ.get("LD_LIBRARY_PATH", "")) if p)
    return env

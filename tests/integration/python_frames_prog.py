#!/usr/bin/env python3
"""python_frames_prog.py MODE - allocates through the CUDA driver API from named Python
functions, for python_frames_check.py (run under libluma.so on the stand-in driver).

MODE pydll: through ctypes.PyDLL, which keeps the GIL during the foreign call:
            allocate_small (3 x 1 MiB) and allocate_large (1 x 4 MiB) on the main thread,
            Worker.allocate_in_thread (2 x 2 MiB) on a Python thread, one allocation while
            an exception is being handled (which it must leave as it was);
MODE cdll:  the same calls through ctypes.CDLL, which releases the GIL around the call:
            luma reads the same Python frames without it (and neither crashes nor hangs).
The lines the checker looks for carry a "# LINE:" marker. Prints "done" at the end.
"""
import ctypes
import sys
import threading

MIB = 1 << 20


def check(what, rc):
    if rc != 0:
        sys.exit("%s returned %d" % (what, rc))


def allocate_small(cu, live):
    p = ctypes.c_uint64()
    check("cuMemAlloc", cu.cuMemAlloc_v2(ctypes.byref(p), MIB))  # LINE: small
    live.append(p.value)


def allocate_large(cu, live):
    p = ctypes.c_uint64()
    check("cuMemAlloc", cu.cuMemAlloc_v2(ctypes.byref(p), 4 * MIB))  # LINE: large
    live.append(p.value)


class Worker(threading.Thread):
    def __init__(self, cu, ctx, live):
        super().__init__(name="allocating-worker")
        self.cu, self.ctx, self.live = cu, ctx, live

    def run(self):
        check("cuCtxSetCurrent", self.cu.cuCtxSetCurrent(self.ctx))
        for _ in range(2):
            self.allocate_in_thread()

    def allocate_in_thread(self):
        p = ctypes.c_uint64()
        check("cuMemAlloc", self.cu.cuMemAlloc_v2(ctypes.byref(p), 2 * MIB))  # LINE: thread
        self.live.append(p.value)


def main():
    mode = sys.argv[1]
    loader = {"pydll": ctypes.PyDLL, "cdll": ctypes.CDLL}[mode]
    cu = loader("libcuda.so.1")
    check("cuInit", cu.cuInit(0))
    dev = ctypes.c_int()
    check("cuDeviceGet", cu.cuDeviceGet(ctypes.byref(dev), 0))
    ctx = ctypes.c_void_p()
    check("cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
    check("cuCtxSetCurrent", cu.cuCtxSetCurrent(ctx))
    live = []
    for _ in range(3):
        allocate_small(cu, live)
    allocate_large(cu, live)
    worker = Worker(cu, ctx, live)
    worker.start()
    worker.join()
    try:
        raise KeyError("kept")
    except KeyError:
        allocate_small(cu, live)
        if sys.exc_info()[0] is not KeyError:
            sys.exit("the exception being handled changed across an allocation")
    for p in live:
        check("cuMemFree", cu.cuMemFree_v2(ctypes.c_uint64(p)))
    print("done")


if __name__ == "__main__":
    main()

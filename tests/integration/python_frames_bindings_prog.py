#!/usr/bin/env python3
"""python_frames_bindings_prog.py - allocates through NVIDIA's Python driver bindings
(cuda.bindings.driver, whose driver calls release the GIL: `with nogil` in the generated
Cython) from named Python functions, for python_frames_bindings_check.py, which runs it
under `luma run --stacks` on the stand-in driver:

  allocate_weights            3 x 1 MiB on the main thread;
  chunks                      2 x 4 MiB from a generator (a frame the generator owns);
  Loader.allocate_batch       2 x 2 MiB on a Python thread, at the same time as the main
                              thread allocates (both without the GIL);
  allocate_weights again      inside an exception handler.

Each block is written and read back (the bindings work on the stand-in). The lines the
checker looks for carry a "# LINE:" marker. Prints "done" at the end.
"""
import sys
import threading

from cuda.bindings import driver as cu

MIB = 1 << 20


def check(what, result):
    if result[0] != cu.CUresult.CUDA_SUCCESS:
        sys.exit("%s returned %s" % (what, result[0].name))
    return result[1] if len(result) == 2 else result[1:]


def allocate_weights(live):
    live.append((check("cuMemAlloc", cu.cuMemAlloc(MIB)), MIB))  # LINE: weights


def chunks(n):
    for _ in range(n):
        yield check("cuMemAlloc", cu.cuMemAlloc(4 * MIB)), 4 * MIB  # LINE: generator


class Loader(threading.Thread):
    def __init__(self, ctx, live, started):
        super().__init__(name="loader")
        self.ctx, self.live, self.started = ctx, live, started

    def run(self):
        check("cuCtxSetCurrent", cu.cuCtxSetCurrent(self.ctx))
        self.started.set()
        for _ in range(2):
            self.allocate_batch()

    def allocate_batch(self):
        self.live.append((check("cuMemAlloc", cu.cuMemAlloc(2 * MIB)), 2 * MIB))  # LINE: batch


def round_trip(ptr, size):
    data = bytes((k * 7) % 251 for k in range(256)) * (size // 256)
    check("cuMemcpyHtoD", cu.cuMemcpyHtoD(ptr, data, size))
    back = bytearray(size)
    check("cuMemcpyDtoH", cu.cuMemcpyDtoH(back, ptr, size))
    if bytes(back) != data:
        sys.exit("the data read back differs")


def main():
    check("cuInit", cu.cuInit(0))
    dev = check("cuDeviceGet", cu.cuDeviceGet(0))
    ctx = check("cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain(dev))
    check("cuCtxSetCurrent", cu.cuCtxSetCurrent(ctx))
    live, thread_live = [], []
    started = threading.Event()
    loader = Loader(ctx, thread_live, started)
    loader.start()
    started.wait()
    for _ in range(2):
        allocate_weights(live)
    live.extend(chunks(2))
    loader.join()
    try:
        raise KeyError("kept")
    except KeyError:
        allocate_weights(live)
        if sys.exc_info()[0] is not KeyError:
            sys.exit("the exception being handled changed across an allocation")
    for ptr, size in live + thread_live:
        round_trip(ptr, size)
        check("cuMemFree", cu.cuMemFree(ptr))
    print("done")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""cuda_bindings_client.py [--peer]: a CUDA driver client written with NVIDIA's Python
bindings (cuda.bindings.driver), run by cuda_bindings_check.py on the stand-in driver alone
and under libluma.so, which must give the same summary.

It does what real Python clients do with the driver: an allocation loop with data checks,
pointer queries, IPC with a second Python process (this script with --peer; the handle is
passed the UCX way: range base, handle of the base, offset), and a relaxed-mode stream
capture launched several times. It prints one JSON object whose values depend only on what
the driver answered (error names, counts, data checks), never on addresses, so that two
runs can be compared. Nothing here knows about luma; `facts` holds answers that a caching
allocator may legitimately change (and the runner does not compare).
"""
import json
import random
import subprocess
import sys
import threading

from cuda.bindings import driver as cu

A = cu.CUpointer_attribute
SUCCESS = cu.CUresult.CUDA_SUCCESS


class Errors:
    """Counts every non-success answer by call and error name (the summary's error codes)."""

    def __init__(self):
        self.seen = {}

    def check(self, call, result):
        """result: the tuple a cuda.bindings call returns; gives the values after the code."""
        err = result[0]
        if err != SUCCESS:
            key = "%s:%s" % (call, err.name)
            self.seen[key] = self.seen.get(key, 0) + 1
        values = result[1:]
        return values[0] if len(values) == 1 else values

    def summary(self):
        return dict(sorted(self.seen.items()))


def read(errors, ptr, n):
    buf = bytearray(n)
    errors.check("cuMemcpyDtoH", cu.cuMemcpyDtoH(buf, ptr, n))
    return bytes(buf)


def setup(errors):
    errors.check("cuInit", cu.cuInit(0))
    dev = errors.check("cuDeviceGet", cu.cuDeviceGet(0))
    ctx = errors.check("cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain(dev))
    errors.check("cuCtxSetCurrent", cu.cuCtxSetCurrent(ctx))
    return dev


SIZES = [1, 100, 512, 4000, 65536, 1 << 20, 3 << 20, (12 << 20) + 7]


def alloc_loop(errors, iterations=2000, max_live=24):
    """Mixed sizes, a bounded live set, each buffer filled and checked at both ends; now and
    then a host pattern copied in and a device-to-device copy between two live buffers."""
    rng = random.Random(17)
    live = []  # (ptr, size, fill byte)
    mismatches = 0
    copies = 0
    for i in range(iterations):
        if live and (len(live) >= max_live or rng.random() < 0.45):
            ptr, size, fill = live.pop(rng.randrange(len(live)))
            tail = min(size, 64)
            if read(errors, int(ptr) + size - tail, tail) != bytes([fill]) * tail:
                mismatches += 1
            errors.check("cuMemFree", cu.cuMemFree(ptr))
            continue
        size = rng.choice(SIZES)
        ptr = errors.check("cuMemAlloc", cu.cuMemAlloc(size))
        if ptr is None or int(ptr) == 0:
            continue
        fill = (i * 7 + 1) % 251
        errors.check("cuMemsetD8", cu.cuMemsetD8(ptr, fill, size))
        head = min(size, 64)
        if read(errors, ptr, head) != bytes([fill]) * head:
            mismatches += 1
        if i % 16 == 0 and live:
            # A host pattern into the new buffer, then copied over the start of another one.
            other, osize, ofill = live[rng.randrange(len(live))]
            n = min(size, osize, 4096)
            pattern = bytes((i + k) % 256 for k in range(n))
            errors.check("cuMemcpyHtoD", cu.cuMemcpyHtoD(ptr, pattern, n))
            errors.check("cuMemcpyDtoD", cu.cuMemcpyDtoD(other, ptr, n))
            if read(errors, other, n) != pattern:
                mismatches += 1
            copies += 1
            # Restore both so that the tail checks above stay meaningful.
            errors.check("cuMemsetD8", cu.cuMemsetD8(other, ofill, n))
            errors.check("cuMemsetD8", cu.cuMemsetD8(ptr, fill, n))
        live.append((ptr, size, fill))
    for ptr, _, _ in live:
        errors.check("cuMemFree", cu.cuMemFree(ptr))
    return {"iterations": iterations, "device_to_device_copies": copies,
            "data_mismatches": mismatches}


def pointer_queries(errors):
    """For each size: the address range contains the allocation; cuMemGetAddressRange,
    RANGE_START_ADDR/RANGE_SIZE and cuPointerGetAttributes agree; BUFFER_ID is the same by
    both calls; memory type device; an interior pointer names the same range and buffer."""
    attrs = [A.CU_POINTER_ATTRIBUTE_BUFFER_ID, A.CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
             A.CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, A.CU_POINTER_ATTRIBUTE_RANGE_SIZE,
             A.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, A.CU_POINTER_ATTRIBUTE_IS_MANAGED]
    disagreements = []
    facts = {"range_is_the_request": 0, "distinct_buffer_ids": 0}
    ptrs = []
    ids = set()
    for size in SIZES:
        ptr = errors.check("cuMemAlloc", cu.cuMemAlloc(size))
        ptrs.append(ptr)
        base, rsize = errors.check("cuMemGetAddressRange", cu.cuMemGetAddressRange(ptr))
        base = int(base)
        if not (base <= int(ptr) and int(ptr) + size <= base + rsize):
            disagreements.append("%d: range does not contain the allocation" % size)
        if base == int(ptr) and rsize == size:
            facts["range_is_the_request"] += 1
        start = int(errors.check("RANGE_START_ADDR", cu.cuPointerGetAttribute(
            A.CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, ptr)))
        rs = errors.check("RANGE_SIZE",
                          cu.cuPointerGetAttribute(A.CU_POINTER_ATTRIBUTE_RANGE_SIZE, ptr))
        buffer_id = errors.check("BUFFER_ID",
                                 cu.cuPointerGetAttribute(A.CU_POINTER_ATTRIBUTE_BUFFER_ID, ptr))
        mtype = errors.check("MEMORY_TYPE",
                             cu.cuPointerGetAttribute(A.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr))
        values = errors.check("cuPointerGetAttributes",
                              cu.cuPointerGetAttributes(len(attrs), attrs, ptr))
        if (start, rs) != (base, rsize):
            disagreements.append("%d: RANGE_* differ from cuMemGetAddressRange" % size)
        if mtype != cu.CUmemorytype.CU_MEMORYTYPE_DEVICE:
            disagreements.append("%d: memory type %s" % (size, mtype))
        if [values[0], values[1], int(values[2]), values[3], values[4], values[5]] != \
                [buffer_id, int(mtype), base, rsize, 0, 0]:
            disagreements.append("%d: cuPointerGetAttributes disagrees: %s" % (size, values))
        if size > 1:
            inner = int(ptr) + size - 1
            ibase, irsize = errors.check("cuMemGetAddressRange", cu.cuMemGetAddressRange(inner))
            iid = errors.check("BUFFER_ID",
                               cu.cuPointerGetAttribute(A.CU_POINTER_ATTRIBUTE_BUFFER_ID, inner))
            if (int(ibase), irsize, iid) != (base, rsize, buffer_id):
                disagreements.append("%d: interior pointer names another range" % size)
        ids.add(buffer_id)
    facts["distinct_buffer_ids"] = len(ids)
    for ptr in ptrs:
        errors.check("cuMemFree", cu.cuMemFree(ptr))
    # An address no allocation covers (host memory of this process).
    stranger = id(ptrs)
    unknown = cu.cuMemGetAddressRange(stranger)[0].name
    return {"allocations": len(SIZES), "disagreements": disagreements,
            "unknown_pointer_range": unknown}, facts


IPC_SIZE = 3 << 20
IPC_OFFSET_IN_ALLOC = 4096  # the exported region starts inside the allocation
IPC_BYTES = 65536
PEER_COPIES = 20


def pattern(seed, n):
    return bytes((seed + k * 13) % 256 for k in range(n))


def ipc(errors):
    """Export the UCX way (base of the range, handle of the base, offset), let a peer Python
    process read our pattern and write its own after it, check what it wrote."""
    ptr = errors.check("cuMemAlloc", cu.cuMemAlloc(IPC_SIZE))
    region = int(ptr) + IPC_OFFSET_IN_ALLOC
    errors.check("cuMemsetD8", cu.cuMemsetD8(ptr, 0, IPC_SIZE))
    errors.check("cuMemcpyHtoD", cu.cuMemcpyHtoD(region, pattern(1, IPC_BYTES), IPC_BYTES))
    base, _ = errors.check("cuMemGetAddressRange", cu.cuMemGetAddressRange(region))
    handle = errors.check("cuIpcGetMemHandle", cu.cuIpcGetMemHandle(base))
    offset = region - int(base)
    result = {}
    # Opening one's own handle is refused by the driver (the exporting context).
    own = cu.cuIpcOpenMemHandle(handle, cu.CUipcMem_flags.CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
    result["open_in_exporter"] = own[0].name
    peer = subprocess.run([sys.executable, __file__, "--peer", bytes(handle.reserved).hex(),
                           str(offset)], capture_output=True, text=True, timeout=60)
    try:
        result["peer"] = json.loads(peer.stdout)
    except ValueError:
        result["peer"] = {"exit": peer.returncode, "stdout": peer.stdout[-500:],
                          "stderr": peer.stderr[-2000:]}
    result["peer_exit"] = peer.returncode
    result["peer_data_seen_here"] = read(errors, region + IPC_BYTES, IPC_BYTES) == \
        pattern(2, IPC_BYTES)
    result["own_data_intact"] = read(errors, region, IPC_BYTES) == pattern(1, IPC_BYTES)
    errors.check("cuMemFree", cu.cuMemFree(ptr))
    return result


def ipc_peer(handle_hex, offset):
    errors = Errors()
    setup(errors)
    handle = cu.CUipcMemHandle()
    handle.reserved = bytes.fromhex(handle_hex)
    base = errors.check("cuIpcOpenMemHandle", cu.cuIpcOpenMemHandle(
        handle, cu.CUipcMem_flags.CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
    out = {"opened": base is not None and int(base) != 0}
    if out["opened"]:
        region = int(base) + offset
        out["exporter_data_seen_here"] = read(errors, region, IPC_BYTES) == pattern(1, IPC_BYTES)
        errors.check("cuMemcpyHtoD", cu.cuMemcpyHtoD(region + IPC_BYTES, pattern(2, IPC_BYTES),
                                                     IPC_BYTES))
        rbase, _ = errors.check("cuMemGetAddressRange", cu.cuMemGetAddressRange(region))
        out["range_base_is_opened_base"] = int(rbase) == int(base)
        # Local allocations filled from the imported memory by device-to-device copies.
        copies_right = 0
        for _ in range(PEER_COPIES):
            local = errors.check("cuMemAlloc", cu.cuMemAlloc(IPC_BYTES))
            errors.check("cuMemcpyDtoD", cu.cuMemcpyDtoD(local, region, IPC_BYTES))
            copies_right += read(errors, local, IPC_BYTES) == pattern(1, IPC_BYTES)
            errors.check("cuMemFree", cu.cuMemFree(local))
        out["copies_from_imported_right"] = copies_right
        errors.check("cuIpcCloseMemHandle", cu.cuIpcCloseMemHandle(base))
        out["close_again"] = cu.cuIpcCloseMemHandle(base)[0].name
    out["errors"] = errors.summary()
    print(json.dumps(out, sort_keys=True))


def capture(errors, launches=5, n=1 << 20):
    """Relaxed-mode capture on a non-blocking stream: a memset and a copy into a buffer
    allocated during the capture (allowed in relaxed mode); the graph is launched several
    times, the source changed between launches, the destination checked each time."""
    src = errors.check("cuMemAlloc", cu.cuMemAlloc(n))
    stream = errors.check("cuStreamCreate",
                          cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING.value))
    mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
    errors.check("cuStreamBeginCapture", cu.cuStreamBeginCapture(stream, mode))
    status = errors.check("cuStreamIsCapturing", cu.cuStreamIsCapturing(stream))
    dst = errors.check("cuMemAlloc(capturing)", cu.cuMemAlloc(n))
    errors.check("cuMemsetD8Async", cu.cuMemsetD8Async(dst, 0xAB, n, stream))
    errors.check("cuMemcpyDtoDAsync", cu.cuMemcpyDtoDAsync(dst, src, n // 2, stream))
    graph = errors.check("cuStreamEndCapture", cu.cuStreamEndCapture(stream))
    exe = errors.check("cuGraphInstantiate", cu.cuGraphInstantiate(graph, 0))
    good = 0
    for k in range(launches):
        errors.check("cuMemsetD8", cu.cuMemsetD8(dst, 0, n))  # the graph must rewrite it all
        errors.check("cuMemsetD8", cu.cuMemsetD8(src, k + 1, n))
        errors.check("cuGraphLaunch", cu.cuGraphLaunch(exe, stream))
        errors.check("cuStreamSynchronize", cu.cuStreamSynchronize(stream))
        got = read(errors, dst, n)
        if got == bytes([k + 1]) * (n // 2) + b"\xab" * (n - n // 2):
            good += 1
    errors.check("cuGraphExecDestroy", cu.cuGraphExecDestroy(exe))
    errors.check("cuGraphDestroy", cu.cuGraphDestroy(graph))
    errors.check("cuStreamDestroy", cu.cuStreamDestroy(stream))
    errors.check("cuMemFree", cu.cuMemFree(dst))
    errors.check("cuMemFree", cu.cuMemFree(src))
    return {"capture_status": status.name if status is not None else None,
            "launches": launches, "launches_with_right_data": good}


def refusals(errors):
    """What the driver refuses, which a cache must refuse alike: an allocation and a free on
    a thread with a global-mode capture of its own (which they invalidate), a double free.
    Facts a caching allocator may change: a freed pointer's range, two allocations' handles."""
    out, facts = {}, {}
    keep = errors.check("cuMemAlloc", cu.cuMemAlloc(4096))
    stream = errors.check("cuStreamCreate",
                          cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING.value))
    mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL
    errors.check("cuStreamBeginCapture", cu.cuStreamBeginCapture(stream, mode))
    out["alloc_in_global_capture"] = cu.cuMemAlloc(4096)[0].name
    out["free_in_global_capture"] = cu.cuMemFree(keep)[0].name
    end = cu.cuStreamEndCapture(stream)
    out["end_of_that_capture"] = end[0].name
    if end[1] is not None and int(end[1]) != 0:
        errors.check("cuGraphDestroy", cu.cuGraphDestroy(end[1]))
    errors.check("cuStreamDestroy", cu.cuStreamDestroy(stream))
    out["free_after_refused_free"] = cu.cuMemFree(keep)[0].name
    out["free_twice"] = cu.cuMemFree(keep)[0].name
    facts["range_after_free"] = cu.cuMemGetAddressRange(keep)[0].name
    a = errors.check("cuMemAlloc", cu.cuMemAlloc(4096))
    b = errors.check("cuMemAlloc", cu.cuMemAlloc(4096))
    ha = errors.check("cuIpcGetMemHandle", cu.cuIpcGetMemHandle(a))
    hb = errors.check("cuIpcGetMemHandle", cu.cuIpcGetMemHandle(b))
    facts["two_allocations_one_ipc_handle"] = bytes(ha.reserved) == bytes(hb.reserved)
    errors.check("cuMemFree", cu.cuMemFree(a))
    errors.check("cuMemFree", cu.cuMemFree(b))
    return out, facts


def contexts(errors, dev, rounds=3):
    """Contexts of its own, as some Python libraries make them: each round creates one,
    allocates and fills five buffers, frees three, destroys the context with two still
    live (the driver frees them with it), then tries to free one of those. Ends with the
    primary context current again."""
    out = {"rounds": rounds, "data_right": 0, "free_after_destroy": []}
    for r in range(rounds):
        ctx = errors.check("cuCtxCreate", cu.cuCtxCreate(None, 0, dev))
        ptrs = []
        for i in range(5):
            size = 1000 * (i + 1)
            ptr = errors.check("cuMemAlloc", cu.cuMemAlloc(size))
            errors.check("cuMemsetD8", cu.cuMemsetD8(ptr, r + 1, size))
            ptrs.append(ptr)
        out["data_right"] += read(errors, ptrs[2], 3000) == bytes([r + 1]) * 3000
        for ptr in ptrs[:3]:
            errors.check("cuMemFree", cu.cuMemFree(ptr))
        errors.check("cuCtxDestroy", cu.cuCtxDestroy(ctx))
        out["free_after_destroy"].append(cu.cuMemFree(ptrs[3])[0].name)
    primary = errors.check("cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain(dev))
    errors.check("cuCtxSetCurrent", cu.cuCtxSetCurrent(primary))
    return out


def threads(errors, dev, count=4, steps=300):
    """Python threads allocating at once (the bindings release the GIL in driver calls):
    each makes the primary context current, allocates, fills with its own byte, checks,
    frees; the results are summed in thread order."""
    primary = errors.check("cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain(dev))
    results = [None] * count

    def work(t):
        local = Errors()
        local.check("cuCtxSetCurrent", cu.cuCtxSetCurrent(primary))
        rng = random.Random(100 + t)
        live, right, made = [], 0, 0
        for i in range(steps):
            if live and (len(live) >= 8 or rng.random() < 0.5):
                ptr, size, fill = live.pop(0)
                n = min(size, 256)
                right += read(local, int(ptr) + size - n, n) == bytes([fill]) * n
                local.check("cuMemFree", cu.cuMemFree(ptr))
                continue
            size = rng.choice(SIZES[:6])
            ptr = local.check("cuMemAlloc", cu.cuMemAlloc(size))
            made += 1
            fill = (t * 50 + i) % 251 + 1
            local.check("cuMemsetD8", cu.cuMemsetD8(ptr, fill, size))
            live.append((ptr, size, fill))
        for ptr, size, fill in live:
            n = min(size, 256)
            right += read(local, int(ptr) + size - n, n) == bytes([fill]) * n
            local.check("cuMemFree", cu.cuMemFree(ptr))
        results[t] = (right, made, local.summary())

    pool = [threading.Thread(target=work, args=(t,)) for t in range(count)]
    for th in pool:
        th.start()
    for th in pool:
        th.join(timeout=120)
    out = {"threads": count, "buffers": 0, "buffers_checked_right": 0, "errors": {}}
    for r in results:
        if r is None:
            out["errors"]["thread did not finish"] = out["errors"].get("thread did not finish",
                                                                       0) + 1
            continue
        out["buffers_checked_right"] += r[0]
        out["buffers"] += r[1]
        for k, v in r[2].items():
            out["errors"][k] = out["errors"].get(k, 0) + v
    return out


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--peer":
        ipc_peer(sys.argv[2], int(sys.argv[3]))
        return
    errors = Errors()
    dev = setup(errors)
    summary = {"alloc_loop": alloc_loop(errors)}
    summary["pointer_queries"], facts = pointer_queries(errors)
    summary["ipc"] = ipc(errors)
    summary["capture"] = capture(errors)
    summary["refusals"], more = refusals(errors)
    facts.update(more)
    summary["contexts"] = contexts(errors, dev)
    summary["threads"] = threads(errors, dev)
    summary["errors"] = errors.summary()
    print(json.dumps({"summary": summary, "facts": facts}, sort_keys=True))


if __name__ == "__main__":
    main()

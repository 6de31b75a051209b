#!/usr/bin/env python3
"""make_snapshots.py - writes small PyTorch memory snapshots with Python's own pickler.

The files of tests/torch_snapshot/data/ (and the seeds of tests/fuzz/corpus/fuzz_torch_snapshot/)
are its output: `pickle.dump` of dicts shaped as torch.cuda.memory._snapshot() returns them
(torch/csrc/cuda/Module.cpp: the keys, their order and types; key strings and call stacks
shared objects, as there), so that the C++ reader is tested on the bytes Python really
writes, at each protocol from 2 to 5. torch_snapshot_test.cpp holds what each must read as.
Deterministic: the same files every run.

  window_p2.pickle .. window_p5.pickle  one device; the window misses the run's start
  full_p4.pickle                        two devices, every key PyTorch writes, oom and
                                        snapshot entries, allocator_settings, frames
  training_p4.pickle                    one training step as PyTorch 2.x records it: 60-odd
                                        frames an allocation (the recorder's, the caching
                                        allocator's, the dispatcher's, CPython's around the
                                        program's), external_annotations (zero_grad, step,
                                        a record_function range) and annotate entries
  mempool_p4.pickle                     MemPool.snapshot(): a list of one pool's segments
                                        (torch.cuda.memory_snapshot(pool.id)), no trace
  mempool_traces_p4.pickle              torch._C._cuda_memorySnapshot(pool.id) dumped whole: the
                                        pool's segments, the whole device's trace
  skip_actions_p4.pickle                recorded with skip_actions=['free_requested',
                                        'segment_free']: completions only, segments gone
                                        without a segment_free
  expandable_p4.pickle                  expandable_segments:True: segment_map / segment_unmap
                                        entries, the dump's mapped ranges as segments with
                                        is_expandable True

Usage: make_snapshots.py OUTDIR
"""
import os
import pickle
import sys

MIB = 1 << 20
T0 = 1_700_000_000_000_000  # time_us: microseconds since 1970

FRAME_A = {"filename": "train.py", "name": "forward", "line": 42}
FRAME_B = {"filename": "torch/nn/modules/linear.py", "name": "forward", "line": 125}
FRAME_C = {"filename": "train.py", "name": "setup", "line": 7}
STACK_AB = [FRAME_B, FRAME_A]  # innermost first; one list object, shared as in PyTorch
STACK_C = [FRAME_C]


def entry(action, addr, size, t, stream=0, frames=None):
    e = {"action": action, "addr": addr, "size": size, "stream": stream, "time_us": T0 + t}
    if frames is not None:
        e["frames"] = frames
    return e


def block(address, size, requested, state, frames=None):
    return {"address": address, "size": size, "requested_size": requested, "state": state,
            "frames": frames if frames is not None else []}


def segment(device, address, total, blocks, stream=0, expandable=False, pool=(0, 0)):
    allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
    return {"device": device, "address": address, "total_size": total,
            "allocated_size": allocated, "active_size": allocated,
            "requested_size": sum(b["requested_size"] for b in blocks if b["state"] != "inactive"),
            "stream": stream, "segment_type": "large" if total > 2 * MIB else "small",
            "segment_pool_id": pool, "is_expandable": expandable, "frames": [],
            "blocks": blocks}


S0 = 0x7F0001000000  # 20 MiB, freed in the window
S1 = 0x7F0000000000  # 4 MiB, reserved before the window, kept
S2 = 0x7F0000400000  # 2 MiB, allocated in the window


def window_device0():
    """Reserved 24 MiB when the window begins; peak 26 MiB; 6 MiB at the dump.
    X (1000 B) freed, never seen allocated; W (777 B) allocated all along."""
    trace = [
        entry("free_requested", S0, 1000, 1),
        entry("free_completed", S0, 1000, 2),
        entry("alloc", S0, 3000, 3, frames=STACK_AB),                       # Y
        entry("segment_alloc", S2, 2 * MIB, 4),
        entry("alloc", S2, 100, 5, frames=STACK_AB),                        # Z
        entry("free_requested", S0, 3000, 6, frames=STACK_AB),
        entry("free_completed", S0, 3000, 7, frames=STACK_AB),
        entry("segment_free", S0, 20 * MIB, 8),
    ]
    segments = [
        segment(0, S1, 4 * MIB, [block(S1, 1024, 777, "active_allocated", STACK_C),
                                 block(S1 + 1024, 4 * MIB - 1024, 0, "inactive")]),
        segment(0, S2, 2 * MIB, [block(S2, 512, 100, "active_allocated", STACK_AB),
                                 block(S2 + 512, 2 * MIB - 512, 0, "inactive")]),
    ]
    return trace, segments


def window_snapshot():
    trace, segments = window_device0()
    return {"segments": segments, "device_traces": [trace],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                                   "garbage_collection_threshold": 0.0,
                                   "expandable_segments": False}}


D1 = 0x7E0000000000
SIDE = 0x5555AAAA0000  # a side stream of device 1


def full_snapshot():
    """window_snapshot's device 0, with oom and snapshot entries, and device 1 on a side
    stream with an expandable segment mapped twice and unmapped once."""
    trace0, segments = window_device0()
    trace0 = trace0[:4] + [{"action": "oom", "device_free": 123, "size": 1 << 40, "stream": 0,
                            "time_us": T0 + 4, "frames": STACK_C}] + trace0[4:]
    trace0.append({"action": "snapshot", "addr": 0, "size": 0, "stream": 0, "time_us": T0 + 9})
    trace1 = [
        entry("segment_map", D1, 20 * MIB, 10, SIDE),
        entry("alloc", D1, 15 * MIB, 11, SIDE, STACK_C),
        entry("segment_map", D1 + 20 * MIB, 20 * MIB, 12, SIDE),
        entry("alloc", D1 + 20 * MIB, 10 * MIB, 13, SIDE, STACK_C),  # A's rest is too small
        entry("free_requested", D1, 15 * MIB, 14, SIDE, STACK_C),
        entry("free_completed", D1, 15 * MIB, 15, SIDE, STACK_C),
        entry("segment_unmap", D1, 20 * MIB, 16, SIDE),
    ]
    # What stays mapped: [D1 + 20 MiB, D1 + 40 MiB), B in it.
    segments.append(segment(1, D1 + 20 * MIB, 20 * MIB,
                            [block(D1 + 20 * MIB, 10 * MIB, 10 * MIB, "active_allocated", STACK_C),
                             block(D1 + 30 * MIB, 10 * MIB, 0, "inactive")],
                            stream=SIDE, expandable=True))
    return {"segments": segments, "device_traces": [trace0, trace1],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
                                   "max_split_size": -1, "garbage_collection_threshold": 0.0,
                                   "expandable_segments": True, "pinned_num_register_threads": 1,
                                   "release_lock_on_cudamalloc": False,
                                   "pinned_use_cuda_host_register": False,
                                   "roundup_power2_divisions": {"1": 0, "2": 0}}}


# ---- training_p4.pickle: a training step, frames as PyTorch 2.x records them -------------

def cpp(name, filename="??"):
    return {"filename": filename, "name": name, "line": 0}


def py(filename, line, name):
    return {"filename": filename, "name": name, "line": line}


# The recorder's and the allocator's frames, innermost first, then the dispatcher's.
RECORDER = [cpp("torch::unwind::unwind()"), cpp("torch::CapturedTraceback::gather(bool, bool, bool)"),
            cpp("torch::cuda::(anonymous namespace)::gather_with_cpp()", "memory_snapshot.cpp")]
ALLOCATOR = [cpp("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, "
                 "CUstream_st*)", "CUDACachingAllocator.cpp"),
             cpp("c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::malloc(void**, signed char, "
                 "unsigned long, CUstream_st*)", ""),
             cpp("c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)", ""),
             cpp("at::detail::empty_generic(c10::ArrayRef<long>, c10::Allocator*, c10::DispatchKeySet, "
                 "c10::ScalarType, std::optional<c10::MemoryFormat>)"),
             cpp("at::detail::empty_cuda(c10::ArrayRef<long>, c10::TensorOptions const&)"),
             cpp("at::(anonymous namespace)::create_out(c10::ArrayRef<long>, c10::ArrayRef<long>, "
                 "c10::TensorOptions const&)", "RegisterCUDA_0.cpp"),
             cpp("at::meta::structured_mm::meta(at::Tensor const&, at::Tensor const&)"),
             cpp("c10::impl::wrap_kernel_functor_unboxed_<at::Tensor (at::Tensor const&, at::Tensor const&)>::call",
                 "RegisterCUDA_0.cpp"),
             cpp("at::_ops::mm::redispatch(c10::DispatchKeySet, at::Tensor const&, at::Tensor const&)"),
             cpp("torch::autograd::VariableType::(anonymous namespace)::mm(c10::DispatchKeySet, at::Tensor const&, "
                 "at::Tensor const&)", "VariableType_3.cpp"),
             cpp("at::_ops::mm::call(at::Tensor const&, at::Tensor const&)")]
CPYTHON = [cpp("_PyEval_EvalFrameDefault"), cpp("PyMethod_New"), cpp("_PyObject_MakeTpCall")]
PROCESS = [cpp("PyEval_EvalCode"), cpp("_PyRun_SimpleFileObject"), cpp("Py_RunMain"), cpp("Py_BytesMain"),
           cpp("__libc_start_main"), cpp("_start")]
TORCH = "/venv/lib/python3.12/site-packages/torch/"
BINDING = cpp("torch::autograd::THPVariable_mm(_object*, _object*, _object*)", "python_torch_functions_0.cpp")
MODULE_CALL = [py(TORCH + "nn/modules/module.py", 1790, "_call_impl"), CPYTHON[0],
               py(TORCH + "nn/modules/module.py", 1779, "_wrapped_call_impl"), CPYTHON[0]]


def python_stack(*python_frames, binding=BINDING):
    """RECORDER + ALLOCATOR, the binding, then each Python frame with CPython's frames after it."""
    frames = RECORDER + ALLOCATOR + [binding]
    for f in python_frames:
        frames += f if isinstance(f, list) else [f] + CPYTHON
    return frames + PROCESS


STACK_SETUP = python_stack(py(TORCH + "cuda/memory.py", 900, "_record_memory_history"),
                           py("train.py", 20, "setup"), py("train.py", 90, "<module>"))
STACK_FWD = python_stack(py(TORCH + "nn/modules/linear.py", 125, "forward"), MODULE_CALL,
                         py("model.py", 30, "forward"), MODULE_CALL, py("train.py", 50, "train_step"),
                         py("train.py", 90, "<module>"))
STACK_FWD2 = python_stack(py(TORCH + "nn/modules/linear.py", 125, "forward"), MODULE_CALL,
                          py("model.py", 31, "forward"), MODULE_CALL, py("train.py", 50, "train_step"),
                          py("train.py", 90, "<module>"))
# The autograd engine's thread: C++ frames only.
STACK_BWD = RECORDER + ALLOCATOR + [
    cpp("torch::autograd::generated::MmBackward0::apply(std::vector<at::Tensor>&&)", "Functions.cpp"),
    cpp("torch::autograd::Node::operator()(std::vector<at::Tensor>&&)"),
    cpp("torch::autograd::Engine::evaluate_function(std::shared_ptr<torch::autograd::GraphTask>&, "
        "torch::autograd::Node*, torch::autograd::InputBuffer&, std::shared_ptr<torch::autograd::ReadyQueue> const&)"),
    cpp("torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)"),
    cpp("start_thread"), cpp("__clone3")]
STACK_STEP = python_stack(py(TORCH + "optim/adamw.py", 180, "_init_group"), py(TORCH + "optim/adamw.py", 220, "step"),
                          py(TORCH + "optim/optimizer.py", 485, "wrapper"), py("train.py", 61, "train_step"),
                          py("train.py", 90, "<module>"))
STACK_TEMP = python_stack(py(TORCH + "optim/adamw.py", 400, "_single_tensor_adamw"),
                          py(TORCH + "optim/adamw.py", 230, "step"),
                          py(TORCH + "optim/optimizer.py", 485, "wrapper"), py("train.py", 61, "train_step"),
                          py("train.py", 90, "<module>"))
TRAIN_SITES = 12  # small allocations of their own lines after the step: more sites than the 10 shown


def training_snapshot():
    """A 100 MiB segment; W 10 MiB (setup); forward A1, A2 20 MiB each; backward G 10 MiB,
    A1 and A2 freed; step M, V 10 MiB each and T 30 MiB (freed): the peak, 70 MiB, in
    Optimizer.step; then 12 allocations of 512 B from lines of their own, freed. Times in
    ms (time_us = T0 + 1000 t). Stages: Optimizer.zero_grad (t 5-6, nothing in it),
    forward (record_function, 9-12), backward (annotate entries of the trace, 19-23),
    Optimizer.step (30-40)."""
    s = 0x7F2000000000

    def e(action, addr, size, t, frames=None):
        return entry(action, addr, size, 1000 * t, frames=frames)

    def freed(addr, size, t):
        return [e("free_requested", addr, size, t), e("free_completed", addr, size, t)]

    def mark(stage, name, t):
        return {"action": "annotate", "stage": stage, "name": name, "device": 0, "time_us": T0 + 1000 * t}

    trace = [e("segment_alloc", s, 100 * MIB, 1), e("alloc", s, 10 * MIB, 2, STACK_SETUP),
             e("alloc", s + 10 * MIB, 20 * MIB, 10, STACK_FWD), e("alloc", s + 30 * MIB, 20 * MIB, 11, STACK_FWD2),
             mark("START", "backward", 19), e("alloc", s + 50 * MIB, 10 * MIB, 20, STACK_BWD)]
    trace += freed(s + 10 * MIB, 20 * MIB, 21) + freed(s + 30 * MIB, 20 * MIB, 22)
    trace += [mark("END", "backward", 23), e("alloc", s + 60 * MIB, 10 * MIB, 31, STACK_STEP),
              e("alloc", s + 70 * MIB, 10 * MIB, 32, STACK_STEP), e("alloc", s + 10 * MIB, 30 * MIB, 33, STACK_TEMP)]
    trace += freed(s + 10 * MIB, 30 * MIB, 34)
    for i in range(TRAIN_SITES):
        trace += [e("alloc", s + 80 * MIB, 512, 41 + i, python_stack(py("train.py", 100 + i, "log"),
                                                                  py("train.py", 90, "<module>")))]
        trace += freed(s + 80 * MIB, 512, 41 + i)
    segments = [segment(0, s, 100 * MIB, [
        block(s, 10 * MIB, 10 * MIB, "active_allocated", STACK_SETUP),
        block(s + 10 * MIB, 40 * MIB, 0, "inactive"),
        block(s + 50 * MIB, 10 * MIB, 10 * MIB, "active_allocated", STACK_BWD),
        block(s + 60 * MIB, 10 * MIB, 10 * MIB, "active_allocated", STACK_STEP),
        block(s + 70 * MIB, 10 * MIB, 10 * MIB, "active_allocated", STACK_STEP),
        block(s + 80 * MIB, 20 * MIB, 0, "inactive")])]

    def ann(stage, name, t):
        return {"stage": stage, "name": name, "device": 0, "time_us": T0 + 1000 * t}
    annotations = [ann("START", "Optimizer.zero_grad#AdamW.zero_grad", 5),
                   ann("END", "Optimizer.zero_grad#AdamW.zero_grad", 6),
                   ann("START", "forward", 9), ann("END", "forward", 12),
                   ann("START", "Optimizer.step#AdamW.step", 30), ann("END", "Optimizer.step#AdamW.step", 40)]
    return {"segments": segments, "device_traces": [trace],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                                   "garbage_collection_threshold": 0.0, "expandable_segments": False},
            "external_annotations": annotations}


# ---- a MemPool's snapshot, skip_actions, expandable segments -----------------------------

POOL = (1, 0)  # the first MemPool's id: (uid, 0) as torch.cuda.MemPool() makes it
P0 = 0x7F3000000000  # the pool's segments: 2 MiB and 20 MiB
P1 = 0x7F3000200000
OTHER = 0x7F4000000000  # a default-pool segment of the same device: not the pool's


def mempool_segments():
    return [segment(0, P0, 2 * MIB, [block(P0, 4096, 4000, "active_allocated", STACK_AB),
                                     block(P0 + 4096, 2 * MIB - 4096, 0, "inactive")], pool=POOL),
            segment(0, P1, 20 * MIB, [block(P1, 20 * MIB, 0, "inactive")], pool=POOL)]


def mempool_snapshot():
    """MemPool.snapshot(): 22 MiB reserved in the pool, one block of 4000 B allocated."""
    return mempool_segments()


def mempool_traces_snapshot():
    """The pool's segments, and device 0's whole trace: the pool's 20 MiB segment reserved
    and a 3 MiB block in it allocated and freed, the 4000 B block allocated; around them the
    default pool's segment and a block in it, which are not the pool's."""
    trace = [entry("segment_alloc", OTHER, 2 * MIB, 1), entry("alloc", OTHER, 512, 2, frames=STACK_C),
             entry("alloc", P0, 4000, 3, frames=STACK_AB), entry("segment_alloc", P1, 20 * MIB, 4),
             entry("alloc", P1, 3 * MIB, 5, frames=STACK_AB), entry("free_requested", P1, 3 * MIB, 6),
             entry("free_completed", P1, 3 * MIB, 7), entry("free_requested", OTHER, 512, 8),
             entry("free_completed", OTHER, 512, 9)]
    return {"segments": mempool_segments(), "device_traces": [trace],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                                   "garbage_collection_threshold": 0.0, "expandable_segments": False}}


def skip_actions_snapshot():
    """skip_actions=['free_requested', 'segment_free']: a 2 MiB segment and a 20 MiB one
    reserved, then the 20 MiB one given back (no entry); A 1000 B and B 5 MiB, freed (only
    their completions). At the dump: the 2 MiB segment, empty."""
    s2, s20 = 0x7F5000000000, 0x7F5000200000
    trace = [entry("segment_alloc", s2, 2 * MIB, 1), entry("alloc", s2, 1000, 2, frames=STACK_AB),
             entry("segment_alloc", s20, 20 * MIB, 3), entry("alloc", s20, 5 * MIB, 4, frames=STACK_C),
             entry("free_completed", s20, 5 * MIB, 5), entry("free_completed", s2, 1000, 6)]
    segments = [segment(0, s2, 2 * MIB, [block(s2, 2 * MIB, 0, "inactive")])]
    return {"segments": segments, "device_traces": [trace],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                                   "garbage_collection_threshold": 0.0, "expandable_segments": False}}


def expandable_snapshot():
    """expandable_segments:True, one segment of the device's address space at E: map
    [E, E+20 MiB), A 12 MiB at E, map [E+20, E+40 MiB), B 16 MiB at E+12 MiB, free A, unmap
    A's pages [E, E+12 MiB). Reserved: 20, 40, 28 MiB. At the dump [E+12, E+40 MiB) is
    mapped, B in it: one range, one segment of 28 MiB with is_expandable True."""
    e = 0x7F6000000000
    trace = [entry("segment_map", e, 20 * MIB, 1), entry("alloc", e, 12 * MIB, 2, frames=STACK_AB),
             entry("segment_map", e + 20 * MIB, 20 * MIB, 3),
             entry("alloc", e + 12 * MIB, 16 * MIB, 4, frames=STACK_AB),
             entry("free_requested", e, 12 * MIB, 5, frames=STACK_AB),
             entry("free_completed", e, 12 * MIB, 6, frames=STACK_AB),
             entry("segment_unmap", e, 12 * MIB, 7)]
    segments = [segment(0, e + 12 * MIB, 28 * MIB, [block(e + 12 * MIB, 16 * MIB, 16 * MIB, "active_allocated", STACK_AB),
                                                    block(e + 28 * MIB, 12 * MIB, 0, "inactive")], expandable=True)]
    return {"segments": segments, "device_traces": [trace],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "max_split_size": -1,
                                   "garbage_collection_threshold": 0.0, "expandable_segments": True}}


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for protocol in (2, 3, 4, 5):
        with open(os.path.join(out, f"window_p{protocol}.pickle"), "wb") as f:
            pickle.dump(window_snapshot(), f, protocol=protocol)
    with open(os.path.join(out, "full_p4.pickle"), "wb") as f:
        pickle.dump(full_snapshot(), f, protocol=4)
    with open(os.path.join(out, "training_p4.pickle"), "wb") as f:
        pickle.dump(training_snapshot(), f, protocol=4)
    for name, make in (("mempool", mempool_snapshot), ("mempool_traces", mempool_traces_snapshot),
                       ("skip_actions", skip_actions_snapshot), ("expandable", expandable_snapshot)):
        with open(os.path.join(out, f"{name}_p4.pickle"), "wb") as f:
            pickle.dump(make(), f, protocol=4)


if __name__ == "__main__":
    main()

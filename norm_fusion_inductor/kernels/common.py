"""What the GEMM kernel modules share: the persistent grid's tile order, device queries, Triton's allocator, and
the launch from Inductor's generated code (``wrap_triton`` while a pass traces a launch into its graph)."""

from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl


@triton.jit
def tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """Grouped ordering: GROUP_M row blocks advance together along N so their A tiles stay in L2."""
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = tile_id // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (tile_id % group_size_m)
    pid_n = (tile_id % num_pid_in_group) // group_size_m
    return pid_m, pid_n


def interpret_mode() -> bool:
    """Whether Triton kernels run in the CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@functools.lru_cache(maxsize=None)
def num_sms(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def ensure_allocator() -> None:
    """Device-side tensor descriptors need a small global scratch buffer from Triton's allocator."""
    from triton.runtime import _allocation

    if isinstance(_allocation._allocator.get(), _allocation.NullAllocator):
        def alloc(size: int, alignment: int, stream):
            return torch.empty(size, device="cuda", dtype=torch.int8)

        triton.set_allocator(alloc)


def m_bucket(m: int) -> int:
    """Tuning key for M: one tuning per power of two, so varying batch sizes do not retune every call."""
    return 1 << max(m - 1, 0).bit_length()


# configs timed within this factor of the fastest's first timing are timed again, interleaved: one timing per
# config once picked a config 1.17x slower than the usual one (rms + GELU at 131072x512x1024)
FINALIST_SPREAD = 1.05
MAX_FINALISTS = 2  # each re-timing costs the first compile ~0.05–0.1 s
FINALIST_ROUNDS = 3


def fastest_config(configs, run, what: str, compile_only=None, time_one=None):
    """The config of ``configs`` whose launch ``run(cfg)`` has the lowest time under a CUDA graph; one
    that does not compile, fit in shared memory or launch is skipped. ``compile_only(cfg)``, where given,
    compiles a config without launching it: all are compiled first, on threads (Triton's compiler and ptxas run
    outside the GIL), then timed one by one; the few within ``FINALIST_SPREAD`` of the fastest are timed again,
    interleaved, and the lowest median wins. ``time_one(fn)``: the timer (``timing.graph_ms``)."""
    from ..report import clocked
    from ..timing import graph_ms, interleaved_medians

    time_one = time_one or graph_ms
    with clocked("kernel compile"):
        precompile(configs, compile_only)
    timed = []
    for i, cfg in enumerate(configs):
        try:
            with clocked("kernel compile"):
                run(cfg)  # compile (where precompile could not) and load, outside the graph capture
            timed.append((time_one(lambda cfg=cfg: run(cfg)), i))
        except Exception:
            continue
    if not timed:
        raise RuntimeError(f"no config compiled for {what}")
    timed.sort()
    finalists = [i for ms, i in timed[:MAX_FINALISTS] if ms <= timed[0][0] * FINALIST_SPREAD]
    if len(finalists) == 1:
        return configs[finalists[0]]
    medians = interleaved_medians({i: (lambda cfg=configs[i]: run(cfg)) for i in finalists}, FINALIST_ROUNDS,
                                  time_one)
    return configs[min(medians, key=medians.get)]


def precompile(configs, compile_only, max_threads: int = 8) -> None:
    """``compile_only(cfg)`` for each config, the first alone (it sets up the kernel's caches), the rest on
    threads; a config that fails is left for its launch to report."""
    if compile_only is None or len(configs) < 2:
        return
    import concurrent.futures

    def attempt(cfg):
        try:
            compile_only(cfg)
        except Exception:
            pass

    attempt(configs[0])
    threads = min(max_threads, os.cpu_count() or 1, len(configs) - 1)
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(attempt, configs[1:]))


def traced(t: torch.Tensor) -> bool:
    """Whether a pass is tracing a launch into its graph (fake/functional tensors) rather than running it."""
    return isinstance(t, (torch._subclasses.FakeTensor, torch._subclasses.functional_tensor.FunctionalTensor))


def launcher(kernel, t: torch.Tensor):
    """The kernel itself on real tensors; wrapped by ``torch.library.wrap_triton`` while a pass traces the launch
    into its graph, so that Inductor's generated code launches it (no Python op per call)."""
    return torch.library.wrap_triton(kernel) if traced(t) else kernel


def unused_pointer(t: torch.Tensor) -> torch.Tensor:
    """What to pass for the pointer arguments a launch's flags leave untouched: the operand t itself when the
    launch runs now (nothing is allocated per call), a small buffer of its own while traced — under
    ``wrap_triton`` every pointer the kernel stores to counts as mutated, and a mutated operand is cloned."""
    return t.new_empty(16) if traced(t) else t


def aligned16(t: torch.Tensor) -> bool:
    """Whether t's first element is 16-byte aligned (TMA). While traced, from its storage offset: Inductor's
    buffers start aligned and it copies a misaligned graph input before the call."""
    if traced(t):
        return (t.storage_offset() * t.element_size()) % 16 == 0
    return t.data_ptr() % 16 == 0

"""Kernel variants chosen by measurement: one frozen record, read by the kernels at launch and covered by the pass's
``uuid()``. Each field says what it switches and the measurement that chose its default (H200, bf16; the runs are
in docs/benchmarks_journal.md). To A/B a variant, replace the record for the run:

    from norm_fusion_inductor.kernels import tuning
    with tuning.override(attention_tma=True):
        ...
"""

from __future__ import annotations

import contextlib
import dataclasses


@dataclasses.dataclass(frozen=True)
class KernelTuning:
    #: FlashNormAttention's backward: the merged dq̂ + dK/dV kernel saves the dq̂ kernel's recomputation of S and
    #: dP, where every key fits one block (KV ≤ MAX_MERGED_KV). H = 4: 1.37 ms against 0.81 + 0.86
    #: (softmax), 1.50 against 0.94 + 0.84 (silu) at the jagged max-1024 shape; 1.31 against 0.79 + 0.74 and
    #: 1.43 against 0.88 + 0.77 on dense 768 × 512 rows
    attention_merged_dq_hat: bool = True
    #: FlashNormAttention launches through launch.cached_launch: after a launch key's first call the compiled
    #: kernel's launcher is called directly, without the JIT's per-call argument binding (~65 µs per launch on the
    #: host; up to 7 launches per forward + backward): host 1.27–1.54 → 1.01–1.18 ms per call
    attention_cached_launch: bool = True
    #: FlashNormAttention's forward adds the residual q̂ into its fp32 accumulator (activations other than
    #: softmax): fewer registers, one rounding of x. silu, H = 4, D = 128: 1.049 / 1.142 ms (dense /
    #: jagged) against 1.095 / 1.200 at the best config without it
    attention_residual_in_acc: bool = True
    #: FlashNormAttention reads through tensor descriptors: right on the GPU, but its forward measured slower
    #: than the pointer path
    attention_tma: bool = False
    #: the epilogue GEMM's activations with bf16 outputs take σ (SiLU, tanh-GELU) and the 16-bit erf's tanh on one
    #: MUFU operation (tanh.approx.f32, relative error 2^-11, under bf16's rounding) instead of exp and a
    #: reciprocal: the epilogue is MUFU-bound at short K. 131072×512×1024 (× cuBLAS): rms + SiLU 1.39 → 1.11,
    #: LN + bias + GELU 1.63 → 1.30, SwiGLU 1.08 → 0.94; the recsys towers 1.156 → 1.262x and 1.081 → 1.188x
    #: torch.compile default (`epilogue_configs.py --pieces --variant epilogue_fast_sigmoid`)
    epilogue_fast_sigmoid: bool = True
    #: the epilogue GEMM reads its residual tile (the stream's producer; x in the norm's backward) after the k-loop
    #: instead of before it, so that the tile holds no registers through the mainloop: residual 1.49 → 1.38,
    #: residual + RMS statistics 1.63 → 1.57 × cuBLAS at 131072×512×1024, LN statistics unchanged
    #: (`--variant epilogue_load_after_mainloop`)
    epilogue_load_after_mainloop: bool = True
    #: the epilogue GEMM's statistics epilogues (the stream's producers) also offered the 128×256 tiles, each
    #: writing two 128-column statistics segments (the plain GEMM prefers 128×256); the tuner picks them for every
    #: statistics epilogue, the same bits as on 128×128 tiles. × cuBLAS at 131072×1024×512 / 262144×1024×256:
    #: LN statistics 1.27 → 1.12 / 1.24 → 1.10, bias + residual + LN statistics 1.51 → 1.36 / 1.41 → 1.31, RMS
    #: statistics unchanged (`epilogue_configs.py --pieces --variant epilogue_stats_two_segments`)
    epilogue_stats_two_segments: bool = True
    #: the pre-norm/post-norm and FlashNormAttention ops run their Triton kernels on CPU tensors (under
    #: TRITON_INTERPRET=1) instead of their torch reference: for tests, the interpreter being far slower
    interpret_on_cpu: bool = False


_current = KernelTuning()


def current() -> KernelTuning:
    """The record the kernels launch with."""
    return _current


def changed(record: KernelTuning) -> dict:
    """The fields of ``record`` that differ from their defaults."""
    default = KernelTuning()
    return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)
            if getattr(record, f.name) != getattr(default, f.name)}


def adopt(**changes) -> KernelTuning:
    """The kernels launch with these fields changed from now on in this process (a benchmark's A/B run)."""
    global _current
    _current = dataclasses.replace(_current, **changes)
    return _current


@contextlib.contextmanager
def override(**changes):
    """The kernels launch with these fields changed inside the block (unknown names raise)."""
    global _current
    saved = _current
    _current = dataclasses.replace(saved, **changes)
    try:
        yield _current
    finally:
        _current = saved

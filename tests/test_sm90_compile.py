"""Every Triton kernel launched from Python, compiled for sm_90 (H100/H200) on a machine without a GPU.

Why: without a GPU the tests run the kernels in the Triton interpreter, which never compiles them, so errors that
only the GPU compiler reports reach the GPU untested (one did: "Loop-carried variable _ has initial type int32 but
is re-assigned to fp32 tensor in loop"). Triton's CUDA backend compiles for sm_90 offline, down to ptxas and a
cubin, and reports them.

How: conftest.py sets TRITON_INTERPRET=1 before the kernels are imported, which makes every @triton.jit an
interpreter function in this process. So each kernel module is compiled in a subprocess without it: this file run
as a script (``python tests/test_sm90_compile.py epilogue_gemm``). The script calls the module's own host code
(launch, post_norm_gemm, forward, backward, ...) on small CPU tensors that claim to be on the GPU, so that the host code
picks its GPU block configs, with the kernels replaced by recorders. Each distinct recorded launch (argument types
and constexpr flags as the launch code made them) is then compiled for sm_90. It prints one line per launch, "ok"
or "FAIL" with the error, and exits non-zero on a failure. A kernel (``*_kernel``) that no scenario launches is a
failure too: a new kernel needs its launches below. Compiled kernels land in Triton's cache, so reruns of unchanged
kernels are quick.
"""

import concurrent.futures
import importlib
import multiprocessing
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
MODULES = ("epilogue_gemm", "norm_attention")


def _skip_reason():
    if torch.cuda.is_available():
        return "a GPU is present: the GPU tests compile the kernels for real"
    try:
        import triton.backends
        from triton import knobs

        if "nvidia" not in triton.backends.backends:
            return "Triton has no CUDA backend"
        knobs.nvidia.ptxas.path  # raises when no ptxas is found
    except Exception as e:
        return f"no Triton CUDA backend / ptxas: {type(e).__name__}: {e}"
    return None


SKIP_REASON = _skip_reason()


@pytest.mark.skipif(SKIP_REASON is not None, reason=str(SKIP_REASON))
@pytest.mark.parametrize("module", MODULES)
def test_kernels_compile_for_sm90(module):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, __file__, module], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    print(proc.stdout)  # what was compiled (pytest -rP shows it)
    # the script's report less its "ok" lines: the failures with their errors, and the summary
    report = "\n".join(line for line in proc.stdout.splitlines() if not line.startswith("ok "))
    if proc.returncode != 0:
        pytest.fail(f"{report}\n{proc.stderr[-3000:]}", pytrace=False)


# --- the script side: runs in the subprocess, without TRITON_INTERPRET ------------------------------------------------

class _OnGpu(torch.Tensor):
    """A CPU tensor that says it is on the GPU: the host code then picks its GPU configs and launch options."""

    @property
    def is_cuda(self):
        return True


def _on_gpu(t):
    return torch.Tensor._make_subclass(_OnGpu, t)


def _empty(*shape, dtype=torch.bfloat16):
    return _on_gpu(torch.empty(*shape, dtype=dtype))


class _Recorder:
    """Stands in for a kernel: ``kernel[grid](*args, **kwargs)`` records the launch instead of running it."""

    def __init__(self, kernel, launches):
        self.kernel, self.launches = kernel, launches

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launches.append((self.kernel, args, kwargs))


def _record(module, scenario) -> list:
    """The launches ``scenario(module)`` makes, with the module's kernels replaced by recorders meanwhile."""
    import triton

    launches = []
    kernels = {n: f for n, f in vars(module).items() if isinstance(f, triton.runtime.JITFunction)}
    try:
        for name, kernel in kernels.items():
            setattr(module, name, _Recorder(kernel, launches))
        scenario(module)
    finally:
        for name, kernel in kernels.items():
            setattr(module, name, kernel)
    return launches


_TYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", torch.int32: "i32",
          torch.int64: "i64", torch.int8: "i8"}


def _specialize(value):
    """(type, 16-divisible?) of a non-constexpr argument as Triton's launcher specializes it; type None: a
    constexpr (None, and integers equal to 1)."""
    if value is None or (type(value) is int and value == 1):
        return None, False
    if isinstance(value, torch.Tensor):
        return "*" + _TYPES[value.dtype], value.data_ptr() % 16 == 0
    if isinstance(value, bool):
        return "u1", False
    if isinstance(value, int):
        return ("i32" if -2**31 <= value < 2**31 else "i64"), value % 16 == 0
    if isinstance(value, float):
        return "fp32", False
    raise TypeError(f"argument {value!r}")


def _compile_spec(kernel, args, kwargs) -> dict:
    """What ``triton.compile`` gets for this launch on the GPU: signature, constexprs, attributes, options."""
    names = kernel.arg_names
    values = dict(zip(names, args)) | {k: v for k, v in kwargs.items() if k in names}
    signature, constexprs, attrs = {}, {}, {}
    for i, (name, param) in enumerate(zip(names, kernel.params)):
        kind, aligned = (None, False) if param.is_constexpr else _specialize(values[name])
        if kind is None:
            signature[name], constexprs[(i,)] = "constexpr", values[name]
        else:
            signature[name] = kind
            if aligned:
                attrs[(i,)] = [["tt.divisibility", 16]]
    options = {k: v for k, v in kwargs.items() if k not in names}  # num_warps, num_stages, ...
    return dict(kernel=kernel.__name__, module=kernel.fn.__module__, signature=signature, constexprs=constexprs,
                attrs=attrs, options=options)


def _label(spec) -> str:
    """kernel(type of its first operand) flags; flags that are off are left out."""
    names = list(spec["signature"])
    flags = [names[i] if v is True else f"{names[i]}={v}" for (i,), v in spec["constexprs"].items()
             if v is not None and v is not False]
    wide = [f"{k}:{t}" for k, t in spec["signature"].items() if t in ("fp64", "*i64", "i64")]
    options = [f"{k}={v}" for k, v in spec["options"].items()]
    return " ".join([f"{spec['kernel']}({spec['signature'][names[0]]})", *flags, *options, *wide])


def _compile_sm90(spec: dict):
    """(seconds, error message or None) of compiling one launch for sm_90 (a worker process)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    kernel = getattr(sys.modules[spec["module"]], spec["kernel"])
    start = time.perf_counter()
    try:
        src = ASTSource(fn=kernel, signature=spec["signature"], constexprs=spec["constexprs"], attrs=spec["attrs"])
        compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=spec["options"])
        error = _resources(compiled, _label(spec)) if os.environ.get("SM90_RESOURCES") else None
    except Exception as e:
        error = _innermost(e)
    return time.perf_counter() - start, error


def _resources(compiled, label: str) -> None:
    """Print ptxas's register and spill count of a compiled kernel (``SM90_RESOURCES=1``: which launches spill)."""
    import tempfile

    from triton import knobs

    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as f:
        f.write(compiled.asm["ptx"])
        f.flush()
        proc = subprocess.run([knobs.nvidia.ptxas.path, "-arch=sm_90a", "-v", f.name, "-o", os.devnull],
                              capture_output=True, text=True)
    lines = [line.split("info    : ")[-1].strip() for line in proc.stderr.splitlines()
             if "Used" in line or "spill" in line]
    print(f"resources {label}: {' | '.join(lines)}", flush=True)


def _innermost(e: BaseException) -> str:
    """A compile error's cause and where in the source: Triton nests the cause under one CompilationError per
    @jit call level; the innermost one shows the line."""
    chain = [e]
    while chain[-1].__cause__ is not None or chain[-1].__context__ is not None:
        chain.append(chain[-1].__cause__ or chain[-1].__context__)
    cause = f"{type(chain[-1]).__name__}: {str(chain[-1]).strip()}"
    located = [c for c in chain if type(c).__name__ == "CompilationError"]
    if not located:
        return cause
    excerpt = str(located[-1]).strip()
    for tail in (str(chain[-1]).strip(), repr(chain[-1])):  # the excerpt ends with the cause again
        excerpt = excerpt.removesuffix(tail).rstrip()
    return f"{cause}\n{excerpt}"


# Launch scenarios: each module's host code, called as the plugin (and benchmarks) call it, on GPU-sized bf16
# operands; statistics, partials and counters are whatever the host code allocates.

def _epilogue_gemm(eg):
    eg._num_sms = lambda index: 132
    eg._cached_launch = lambda kernel, grid, args, meta, device, key_extra=(): kernel[grid()](*args, **meta)
    M, K, N = 1024, 512, 1024
    a, w, w_kn = _empty(M, K), _empty(N, K), _empty(K, N)
    rows, cols = (_empty(n, dtype=torch.float32) for n in (M, N))
    full = dict(bias=cols, scale=rows, shift=rows, u=cols)
    # every config the tuner offers, on the consumer epilogue with the most pieces; the producer (statistics
    # segments of 128 columns, one or two per tile) on one- and two-program-per-SM configs
    for cfg in eg.GPU_CONFIGS:
        eg.launch(cfg, a, w, _empty(M, N), epilogue=eg.Epilogue(row_norm="ln", bias=True, activation="gelu",
                                                                write_aux=True), aux=_empty(M, N), **full)
    for cfg in (eg.GPU_CONFIGS[3], eg.GPU_CONFIGS[6], eg.GPU_CONFIGS[0], eg.GPU_CONFIGS[7]):
        eg.launch(cfg, a, w, _empty(M, N), epilogue=eg.Epilogue(bias=True, residual=True, stats="ln"),
                  residual=_empty(M, N), bias=cols, partials=_empty(2, N // 128, M, dtype=torch.float32))
    # each other piece once, on the first config: activations, gated pairs, RMSNorm statistics, W [K, N]
    cfg = eg.GPU_CONFIGS[0]
    for act in eg.ACTIVATIONS + eg.GATED:
        gated = act in eg.GATED
        eg.launch(cfg, a, w, _empty(M, N // 2 if gated else N), epilogue=eg.Epilogue(row_norm="rms", activation=act),
                  scale=rows)
    # σ and tanh on one MUFU operation (tuning.epilogue_fast_sigmoid, the default for bf16 outputs) off: the exact
    # forms; and the residual tile read before the k-loop (tuning.epilogue_load_after_mainloop off)
    from norm_fusion_inductor.kernels import tuning

    with tuning.override(epilogue_load_after_mainloop=False):
        eg.launch(cfg, a, w, _empty(M, N), epilogue=eg.Epilogue(residual=True, stats="rms"), residual=_empty(M, N),
                  partials=_empty(1, N // 128, M, dtype=torch.float32))
    with tuning.override(epilogue_fast_sigmoid=False):
        for act in ("gelu", "gelu_tanh", "silu", "silu_mul"):
            eg.launch(cfg, a, w, _empty(M, N // 2 if act in eg.GATED else N), scale=rows,
                      epilogue=eg.Epilogue(row_norm="rms", activation=act))
    eg.launch(eg.GPU_CONFIGS[3], a, w_kn, _empty(M, N), epilogue=eg.Epilogue(residual=True, stats="rms"), w_kn=True,
              residual=_empty(M, N), partials=_empty(1, N // 128, M, dtype=torch.float32))
    # a post-norm stream read as its normalized value (LayerNorm with γ and β; RMSNorm with γ)
    for kind, shift, bias in (("ln", rows, cols), ("rms", None, None)):
        eg.launch(eg.GPU_CONFIGS[3], a, w, _empty(M, N), residual=_empty(M, N), bias=cols,
                  epilogue=eg.Epilogue(bias=True, residual=True, stats=kind, residual_norm=kind),
                  partials=_empty(2 if kind == "ln" else 1, N // 128, M, dtype=torch.float32),
                  residual_norm=eg.ResidualNorm(rows, shift, cols, bias))
    # the per-head norm + RoPE of a q/k projection (QK-norm in the epilogue) on every config, heads of 128 and 64,
    # and of 256 on the configs whose tiles hold one (Gemma 3's)
    for cfg in eg.GPU_CONFIGS:
        for head_dim in (256, 128, 64) if cfg["BLOCK_N"] == 256 else (128, 64):
            tables = _empty(M, head_dim)
            eg.launch(cfg, a, w, _empty(M, N), epilogue=eg.Epilogue(row_norm="rms", head_dim=head_dim, rope=True),
                      scale=rows, head_norm=eg.HeadNorm(_empty(head_dim), 1e-6, tables, tables))
    # RoPE's interleaved form (GPT-J's, Cohere's), alone and after the norm with training's aux store
    for head_norm, aux in ((False, None), (True, _empty(M, N))):
        eg.launch(eg.GPU_CONFIGS[0], a, w, _empty(M, N), aux=aux, scale=rows,
                  epilogue=eg.Epilogue(row_norm="rms", head_dim=128, rope=True, head_norm=head_norm,
                                       rope_interleaved=True, write_aux=aux is not None),
                  head_norm=eg.HeadNorm(_empty(128) if head_norm else None, 1e-6, _empty(M, 128), _empty(M, 128)))
    # partial rotary over halves (GPT-NeoX's, GLM-4.5's): the first rope_dim columns of each head rotated over
    # their halves (tables [M, rope_dim]), after the norm on every config (half a head of 128); a quarter with
    # training's aux store; RoPE alone over a quarter of 64
    for cfg in eg.GPU_CONFIGS:
        eg.launch(cfg, a, w, _empty(M, N), scale=rows,
                  epilogue=eg.Epilogue(row_norm="rms", head_dim=128, rope=True, rope_dim=64),
                  head_norm=eg.HeadNorm(_empty(128), 1e-6, _empty(M, 64), _empty(M, 64)))
    for head_dim, rope_dim, aux in ((128, 32, _empty(M, N)), (64, 16, None)):
        eg.launch(eg.GPU_CONFIGS[0], a, w, _empty(M, N), aux=aux, scale=rows,
                  epilogue=eg.Epilogue(row_norm="rms", head_dim=head_dim, rope=True, head_norm=aux is not None,
                                       rope_dim=rope_dim, write_aux=aux is not None),
                  head_norm=eg.HeadNorm(_empty(head_dim) if aux is not None else None, 1e-6, _empty(M, rope_dim),
                                        _empty(M, rope_dim)))
    # output gates between the heads (Qwen3-Next's q): QK-norm + RoPE over a quarter on every config, heads of 128;
    # with training's aux store, heads of 256 (one head a tile at BLOCK_N 256)
    for cfg in eg.GPU_CONFIGS:
        eg.launch(cfg, a, w, _empty(M, N), scale=rows,
                  epilogue=eg.Epilogue(row_norm="rms", head_dim=128, rope=True, rope_dim=32, head_gates=True),
                  head_norm=eg.HeadNorm(_empty(128), 1e-6, _empty(M, 32), _empty(M, 32)))
    eg.launch(eg.GPU_CONFIGS[0], a, w, _empty(M, N), aux=_empty(M, N), scale=rows,
              epilogue=eg.Epilogue(row_norm="rms", head_dim=256, rope=True, rope_dim=64, head_gates=True,
                                   write_aux=True),
              head_norm=eg.HeadNorm(_empty(256), 1e-6, _empty(M, 64), _empty(M, 64)))
    # the per-head LayerNorm with a weight per head (Cohere's QK-norm): before the interleaved RoPE with training's
    # aux store, heads of 128; with output gates and RoPE over a quarter, heads of 256
    eg.launch(eg.GPU_CONFIGS[0], a, w, _empty(M, N), aux=_empty(M, N), scale=rows,
              epilogue=eg.Epilogue(row_norm="rms", head_dim=128, rope=True, rope_interleaved=True, head_center=True,
                                   write_aux=True),
              head_norm=eg.HeadNorm(_empty(N // 128, 128), 1e-6, _empty(M, 128), _empty(M, 128)))
    eg.launch(eg.GPU_CONFIGS[0], a, w, _empty(M, N), scale=rows,
              epilogue=eg.Epilogue(row_norm="rms", head_dim=256, rope=True, rope_dim=64, head_gates=True,
                                   head_center=True),
              head_norm=eg.HeadNorm(_empty(N // 512, 256), 1e-6, _empty(M, 64), _empty(M, 64)))
    # its eps read from a tensor (a graph input under dynamic shapes)
    eg.launch(eg.GPU_CONFIGS[0], a, w, _empty(M, N), epilogue=eg.Epilogue(row_norm="rms", head_dim=128, rope=True),
              scale=rows, head_norm=eg.HeadNorm(_empty(128), _empty(1, dtype=torch.float32), _empty(M, 128),
                                                _empty(M, 128)))
    # the RMSNorm backward on the dgrad (c̄ given) on every config it runs with, at a width of several tiles, with dR
    for cfg in eg.norm_backward_configs():
        eg.launch(cfg, _empty(M, N), _empty(N, K), _empty(M, K), w_kn=True, residual=_empty(M, K), scale=rows,
                  shift=rows, epilogue=eg.Epilogue(residual=True, norm_backward="rms"), x=_empty(M, K),
                  gamma=_empty(K), colpart=_empty(M // 128, K, dtype=torch.float32))
    _post_norm(eg, a)


def _post_norm(eg, a):
    """The post-norm piece (whole rows in a tile) through its host entry, as the op and the direct launch call it:
    rows of 256, 96 and 24 columns (BLOCK_N 256, 128, 64), every config the tuner offers for each
    (``_configs``), LayerNorm with every operand on (the most registers: bias, residual, γ, β, z written, a
    residual after the norm); RMSNorm with every operand on at each width; each norm with none of them (W [K, N],
    eps from a tensor) once per width."""
    M, K = a.shape

    def post(cfg, n, layer_norm, full, w_kn=False):
        eg.post_norm_gemm(a, _empty(K, n) if w_kn else _empty(n, K), _empty(n) if full else None,
                          _empty(M, n) if full else None, _empty(n) if full else None,
                          _empty(n) if full and layer_norm else None, 1e-6 if full else _empty(1, dtype=torch.float32),
                          layer_norm=layer_norm, write_z=full, w_kn=w_kn, residual_after=_empty(M, n) if full else None,
                          config=cfg)

    for n in (256, 96, 24):
        configs = eg._configs(a, eg.Epilogue(post_norm="ln"), n)
        assert {c["BLOCK_N"] for c in configs} == {max(64, 1 << (n - 1).bit_length())}, configs
        for cfg in configs:
            post(cfg, n, layer_norm=True, full=True)
        rms_configs = eg._configs(a, eg.Epilogue(post_norm="rms"), n)
        for cfg in rms_configs if n == 256 else rms_configs[:1]:
            post(cfg, n, layer_norm=False, full=True)
        for layer_norm in (False, True):
            post(configs[0], n, layer_norm=layer_norm, full=False, w_kn=True)


def _norm_attention(na):
    from norm_fusion_inductor.kernels import tuning

    # H = 2 heads: the kernels unroll their loops over the heads (at H = 8 one dq kernel took a minute to compile)
    T, B, kv_len, H = 1024, 4, 200, 2
    # offsets: int32 as the pass makes them, int64 as callers of the jagged API may pass them
    for act, tma, (ln_w, ln_b, rms_w), offsets_dtype, D in [
        ("softmax", False, (True, True, True), torch.int32, 128),
        ("silu", True, (True, False, True), torch.int32, 64),
        ("gelu_tanh", True, (False, True, False), torch.int64, 64),
        ("gelu", False, (False, False, False), torch.int64, 64),
        ("relu2", False, (True, True, False), torch.int32, 64),
    ]:
        W = H * D
        q, k, v, grad_out = _empty(T, W), _empty(B, kv_len, W), _empty(B, kv_len, W), _empty(T, W)
        offsets = _on_gpu(torch.arange(0, T + 1, T // B, dtype=offsets_dtype))
        weights = [_empty(W) if present else None for present in (ln_w, ln_b, rms_w)]
        scale = D ** -0.5
        out, *saved = na.forward(q, k, v, offsets, T // B, H, *weights, scale, act, 1e-5, 1e-6, tma=tma)
        na.backward(grad_out, q, k, v, offsets, T // B, H, *weights, scale, act, *saved, tma=tma)
        if act == "silu":  # the forward without the residual in its accumulator (on by default)
            with tuning.override(attention_residual_in_acc=False):
                na.forward(q, k, v, offsets, T // B, H, *weights, scale, act, 1e-5, 1e-6, tma=tma)
        if act in ("softmax", "silu"):  # the merged dq̂ + dK/dV kernel: every key in one block (KV ≤ 128)
            short_k, short_v = _empty(B, 128, W), _empty(B, 128, W)
            na.backward(grad_out, q, short_k, short_v, offsets, T // B, H, *weights, scale, act, *saved, tma=tma,
                        merged=True)


SCENARIOS = {"epilogue_gemm": _epilogue_gemm, "norm_attention": _norm_attention}
# Inductor's generated code launches these itself (direct launch) and passes Python floats as fp64 (Triton's
# launcher: fp32): the first launch of each kind named here (a predicate on the launch) is compiled that way too.
# The epilogue GEMM's norm eps (the post-norm's, the per-head norm's) is such a float when it is not a graph tensor.
FP64_SCALARS = {"epilogue_gemm_kernel": (
    lambda spec: _constexpr(spec, "POST_NORM") == 2 and not _constexpr(spec, "EPS_FROM_PTR"),
    lambda spec: _constexpr(spec, "POST_NORM") == 1 and not _constexpr(spec, "EPS_FROM_PTR"),
    lambda spec: _constexpr(spec, "HEAD_DIM") != 0 and not _constexpr(spec, "EPS_FROM_PTR"),
)}
# Launches not compiled, to keep the test fast: the dq̂ kernel of two GDPA activations (gelu, relu2); they differ
# from the others in _activation_grad only, which their dK/dV kernel compiles too
LEAVE_OUT = {"norm_attention": lambda spec: spec["kernel"] == "_dq_hat_kernel" and _constexpr(spec, "ACT") in (1, 4)}


def _constexpr(spec, name):
    return spec["constexprs"][(list(spec["signature"]).index(name),)]


def compile_module(module, scenario) -> list:
    """(label, seconds, error or None) of every distinct launch ``scenario`` makes, compiled for sm_90 on all
    cores; a JIT function named ``*_kernel`` that it never launches is a failure (a kernel left uncovered)."""
    import triton

    specs = {}
    for launch in _record(module, scenario):
        spec = _compile_spec(*launch)
        specs.setdefault(repr(spec), spec)
    leave_out = LEAVE_OUT.get(module.__name__.rsplit(".", 1)[-1], lambda spec: False)
    specs = [spec for spec in specs.values() if not leave_out(spec)]
    for name, kinds in FP64_SCALARS.items():
        if not any(s["kernel"] == name for s in specs):
            continue  # another module's kernel
        for kind in kinds:
            spec = next((s for s in specs if s["kernel"] == name and kind(s)), None)
            if spec is None:
                raise AssertionError(f"no launch of {name} for an fp64 scalar variant: the scenario changed")
            signature = {k: "fp64" if t == "fp32" else t for k, t in spec["signature"].items()}
            assert signature != spec["signature"], f"{name}: no fp32 scalar to widen"
            specs.append(dict(spec, signature=signature))
    context = multiprocessing.get_context("fork")  # the workers find the module (and its kernels) in sys.modules
    with concurrent.futures.ProcessPoolExecutor(os.cpu_count(), mp_context=context) as pool:
        results = pool.map(_compile_sm90, specs)
        results = [(_label(spec), *result) for spec, result in zip(specs, results)]
    launched = {spec["kernel"] for spec in specs}
    results += [(name, 0.0, "never launched by the scenario") for name, f in vars(module).items()
                if isinstance(f, triton.runtime.JITFunction) and name.endswith("_kernel") and name not in launched]
    return results


def main(name: str) -> int:
    assert not os.environ.get("TRITON_INTERPRET"), "TRITON_INTERPRET is set: the interpreter compiles nothing"
    module = importlib.import_module(f"norm_fusion_inductor.kernels.{name}")
    start = time.perf_counter()
    results = compile_module(module, SCENARIOS[name])
    for label, seconds, error in results:
        if error is None:
            print(f"ok   {label} ({seconds:.1f} s)")
        else:
            print(f"FAIL {label}\n" + textwrap.indent(error, "    "))
    failed = sum(error is not None for *_, error in results)
    print(f"{name}: {len(results) - failed} compiled, {failed} failed ({time.perf_counter() - start:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

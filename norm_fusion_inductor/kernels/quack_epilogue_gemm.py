"""The composed-epilogue GEMM on Quack's CuTe-DSL GEMM (Hopper and Blackwell): the second implementation of
``norm_fusion::epilogue_gemm`` (regrouped.py), with the epilogue math of the Triton kernel (epilogue_gemm.py):

    z   = rstd ⊙ acc − (rstd·μ) ⊗ u + b + C        row scale, LayerNorm's mean correction, column bias, residual
    out = act(z),  or act(z_gate) · z_up            gate/up interleaved along N (even columns gate, odd up)
    aux = z;  Σ_n z² per row                        RMSNorm statistics (Quack folds its per-tile partials)

Quack's GEMM overlaps one tile's epilogue with the next tile's mainloop (warp-specialized producer and consumer
warp groups), which the Triton kernel cannot in Triton 3.6. Each combination of pieces is one generated
function for Quack's ``gemm_epilogue`` frontend, so an absent piece is absent from the kernel (how Quack's
``epilogue/library.py`` builds ``norm_act_mod``). Not offered here, and left to the Triton kernel: LayerNorm
statistics (Quack's reductions are running sums, Σz and Σz², which cancel for |μ| ≫ σ; the Triton kernel keeps
per-tile centred sums), a residual normalized on load, fp32 data, and GELU(erf) · up (no Quack pair function).
Quack JIT-compiles each config on first use (seconds). Its own autotuner compiles and times every config of the
architecture (up to 44 on Hopper); on Hopper this module times a shortlist instead (``SM90_SHORTLIST``), once per
shape bucket and epilogue, and the selection keeps the choice with its measurement (``remember``), so a later
process compiles the chosen config alone.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional

import torch

from .common import fastest_config, m_bucket
from .epilogue_gemm import STATS, Epilogue, num_segments

# our activation names -> Quack's (quack.activation.act_fn_map / gate_fn_map)
ACTIVATIONS = {"none": None, "relu": "relu", "gelu": "gelu_erf", "gelu_tanh": "gelu_tanh_approx", "silu": "silu",
               "relu2": "relu_sq"}
GATED = {"silu_mul": "swiglu", "gelu_tanh_mul": "geglu"}

# Hopper: GemmConfig fields of the configs that won (or came second to third in) Quack's full autotune of up to
# 44 configs, on transformer-layer and recommendation-tower GEMMs: far fewer compiles, and close to the sweep's
# best at each GEMM measured (a swapped A and B, slightly faster at K = 256, is left out). Quack's default is the
# third. See docs/decisions.md#quack_epilogue_gemmsm90_shortlist
SM90_SHORTLIST = (
    dict(tile_m=256, tile_n=192, pingpong=False, cluster_m=1, cluster_n=2, swap_ab=False),
    dict(tile_m=256, tile_n=208, pingpong=False, cluster_m=1, cluster_n=2, swap_ab=False),
    dict(tile_m=128, tile_n=192, pingpong=True, cluster_m=2, cluster_n=1, swap_ab=False),
    dict(tile_m=128, tile_n=128, pingpong=True, cluster_m=1, cluster_n=2, swap_ab=False),  # N = 256
    dict(tile_m=192, tile_n=128, pingpong=True, cluster_m=1, cluster_n=2, swap_ab=False),
)


@functools.lru_cache(maxsize=None)
def missing_reason() -> Optional[str]:
    """None if Quack and the CuTe DSL import, else why not (the backend is then not offered)."""
    try:
        import quack  # noqa: F401
        from quack.epilogue import frontend  # noqa: F401
    except Exception as e:  # ImportError, or a CUDA/driver error from the DSL
        return f"quack-kernels is not importable ({type(e).__name__}: {e}); pip install norm_fusion_inductor[cute]"
    return None


def install_reason() -> Optional[str]:
    """None if quack-kernels is installed, found without importing it (an import costs seconds), else why the
    backend is not offered (``missing_reason``)."""
    import importlib.util

    return missing_reason() if importlib.util.find_spec("quack") is None else None


def version() -> str:
    """The installed quack-kernels and CuTe DSL versions (package metadata: Quack is not imported), or "no quack"."""
    try:
        from importlib.metadata import version as dist_version

        return f"quack {dist_version('quack-kernels')} cutlass-dsl {dist_version('nvidia-cutlass-dsl')}"
    except Exception:
        return "no quack"


def unsupported_reason(a: torch.Tensor, w: torch.Tensor, w_kn: bool, epilogue: Epilogue) -> Optional[str]:
    """None if this backend takes the GEMM, else the reason, naming the cause."""
    missing = missing_reason()
    if missing is not None:
        return missing
    if a.device.type != "cuda" or torch.cuda.get_device_capability(a.device)[0] not in (9, 10):
        return "Quack's GEMM runs on sm_90 and sm_100 GPUs"
    if a.dtype not in (torch.float16, torch.bfloat16) or w.dtype != a.dtype:
        return f"Quack backend takes fp16/bf16 operands, got {a.dtype} and {w.dtype}"
    if a.dim() != 2 or w.dim() != 2:
        return "the kernel takes 2-D operands"
    M, K = a.shape
    N = w.shape[1 if w_kn else 0]
    if M == 0:
        return "an empty input"
    if K % 8 or N % 16:
        return f"K={K} must be a multiple of 8 and N={N} of 16 (16-byte rows)"
    if epilogue.stats == "ln":
        return "LayerNorm statistics need centred per-tile sums (the Triton kernel's)"
    if epilogue.residual_norm != "none":
        return "a residual normalized on load is the Triton kernel's piece"
    if epilogue.head_dim:
        return "a per-head norm (QK-norm) is the Triton kernel's piece"
    if epilogue.post_norm != "none":
        return "the post-norm (whole rows in a tile) is the Triton kernel's piece"
    if epilogue.gated and epilogue.activation not in GATED:
        return f"no Quack pair function for {epilogue.activation}"
    if epilogue.write_aux and epilogue.activation == "none":
        return "aux equals the output without an activation"
    return None


@functools.lru_cache(maxsize=None)
def _epilogue_mod(epilogue: Epilogue):
    """The Quack epilogue for these pieces: a generated function (operands absent from its signature are absent
    from the kernel) wrapped by ``quack.epilogue.frontend.gemm_epilogue``."""
    from quack.activation import act_fn_map, gate_fn_map
    from quack.epilogue.frontend import gemm_epilogue
    from quack.epilogue.math import pack, unpack
    from quack.epilogue.ops import ColVecLoad, ColVecReduce, RowVecLoad

    params, body, ops = [], ["x = acc"], {}
    if epilogue.row_norm != "none":
        params.append("s")
        ops["s"] = ColVecLoad("s")
        body.append("x = x * s")
    if epilogue.row_norm == "ln":
        params += ["t", "u"]
        ops["t"], ops["u"] = ColVecLoad("t"), RowVecLoad("u")
        body.append("x = x - u * t")
    if epilogue.bias:
        params.append("bias")
        ops["bias"] = RowVecLoad("bias")
        body.append("x = x + bias")
    if epilogue.residual:
        params.append("c")
        body.append("x = x + c")
    results = []
    if epilogue.gated:
        act = gate_fn_map[GATED[epilogue.activation]]
        body.append("g, v = unpack(x)")
        results += ['"D": pack(g, v)', '"postact": act(g, v)']
    elif epilogue.activation != "none":
        act = act_fn_map[ACTIVATIONS[epilogue.activation]]
        results += ['"D": x', '"postact": act(x)']
    else:
        act = None
        results.append('"D": x')
    reduces = {}
    if epilogue.stats == "rms":
        reduces["sqsum"] = ColVecReduce("sqsum", scaled=True)  # one fma(x, x, Σ) per element
        results.append('"sqsum": (x, x)')
    body.append("return {" + ", ".join(results) + "}")
    tag = f"norm_fusion:{epilogue}"
    source = "\n".join([f"def epilogue({', '.join(['acc', *params])}):", f'    """{tag}"""']
                       + [f"    {line}" for line in body])
    namespace = {"act": act, "pack": pack, "unpack": unpack, "__name__": __name__ + "_generated"}
    exec(compile(source, f"<{tag}>", "exec"), namespace)
    return gemm_epilogue(outputs=("postact",) if act is not None else (), ops=ops, reduces=reduces,
                         mode="acc_pair" if epilogue.gated else None)(namespace["epilogue"])


def epilogue_gemm(a: torch.Tensor, w: torch.Tensor, *, epilogue: Epilogue, w_kn: bool = False, residual=None,
                  bias=None, scale=None, shift=None, u=None, out=None, aux=None, tuned: bool = True):
    """(out, aux, partials) as ``kernels.epilogue_gemm.epilogue_gemm`` returns them (partials: the row sums in
    segment 0, the other segments zero, which ``regrouped.finish_stats`` reads the same). ``out`` and ``aux``:
    buffers to write into (allocated when not given). ``tuned=False``: Quack's default config instead of its
    autotuning (one JIT compile instead of one per candidate; for tests)."""
    M = a.shape[0]
    N = w.shape[1 if w_kn else 0]
    if out is None:
        out = torch.empty(M, N // 2 if epilogue.gated else N, device=a.device, dtype=a.dtype)
    if aux is None and epilogue.write_aux:
        aux = torch.empty(M, N, device=a.device, dtype=a.dtype)
    if epilogue.bias != (bias is not None):
        raise ValueError(f"epilogue.bias={epilogue.bias} but bias is {'given' if bias is not None else 'None'}")
    mod = _epilogue_mod(epilogue)
    operands = {}
    if epilogue.row_norm != "none":
        operands["s"] = scale
    if epilogue.row_norm == "ln":
        operands["t"], operands["u"] = shift, u
    if bias is not None:
        operands["bias"] = bias
    if epilogue.activation == "none":
        outs, store_d = {"D": out}, True
    else:
        outs, store_d = {"postact": out}, aux is not None
        if aux is not None:
            outs["D"] = aux
    def run(config):
        return mod(a, w if w_kn else w.t(), residual, out=outs, store_d=store_d, config=_gemm_config(config),
                   tuned=tuned and config is None, **operands)

    shortlist = _shortlist(a.device, epilogue)
    config = None
    if tuned and shortlist:
        key = _key(M, N, a.shape[1], a.dtype, w_kn, epilogue)
        if key not in _TUNED:
            _TUNED[key] = fastest_config(shortlist, run, f"Quack epilogue GEMM {key}")
        config = _TUNED[key]
    result = run(config)
    partials = a.new_empty(0, dtype=torch.float32)
    if epilogue.stats != "none":
        partials = torch.zeros(STATS[epilogue.stats], num_segments(N, a.device), M, device=a.device,
                               dtype=torch.float32)
        partials[0, 0] = result["sqsum"].reshape(M)
    return out, aux if aux is not None else a.new_empty(0), partials


# (M bucket, N, K, dtype, w_kn, epilogue with bias) -> the shortlist config chosen in this process (or remembered)
_TUNED: dict = {}


def _key(M, N, K, dtype, w_kn, epilogue: Epilogue) -> tuple:
    return (m_bucket(M), N, K, dtype, w_kn, _with_bias(epilogue))


@functools.lru_cache(maxsize=None)
def _with_bias(epilogue: Epilogue) -> Epilogue:
    # a bias does not move the choice: the selection times every GEMM with one (cached: the op's host time per
    # call is priced by the selection)
    return dataclasses.replace(epilogue, bias=True)


def _shortlist(device: torch.device, epilogue: Epilogue) -> tuple:
    return _shortlist_for(device.index if device.index is not None else torch.cuda.current_device(), epilogue)


@functools.lru_cache(maxsize=None)
def _shortlist_for(device_index: int, epilogue: Epilogue) -> tuple:
    """The configs to time on this GPU ((): Quack's own autotuner). As Quack's autotuner prunes them: a gated
    epilogue needs 32-wide N tiles; swapped A and B serve only an element-wise epilogue without reductions."""
    if torch.cuda.get_device_capability(device_index)[0] != 9:
        return ()
    return tuple(c for c in SM90_SHORTLIST
                 if not (epilogue.gated and c["tile_n"] % 32)
                 and not (c["swap_ab"] and (epilogue.gated or epilogue.stats != "none")))


@functools.lru_cache(maxsize=None)
def _gemm_config_cached(fields: tuple):
    from quack.gemm_config import GemmConfig

    return GemmConfig(**dict(fields), device_capacity=9, is_dynamic_persistent=False)


def _gemm_config(config: Optional[dict]):
    return None if config is None else _gemm_config_cached(tuple(sorted(config.items())))


def tuned_for(M: int, N: int, K: int, dtype: torch.dtype, w_kn: bool, epilogue: Epilogue) -> Optional[dict]:
    """The shortlist config chosen (or remembered) in this process for this GEMM, or None."""
    return _TUNED.get(_key(M, N, K, dtype, w_kn, epilogue))


def remember(M: int, N: int, K: int, dtype: torch.dtype, w_kn: bool, epilogue: Epilogue, config: dict) -> None:
    """A config chosen in an earlier process (the selection's cache): used without timing the shortlist again."""
    _TUNED.setdefault(_key(M, N, K, dtype, w_kn, epilogue), dict(config))


def forget(M: int, N: int, K: int, dtype: torch.dtype, w_kn: bool, epilogue: Epilogue) -> None:
    """The next call at this GEMM times the shortlist again (after a probe with one config)."""
    _TUNED.pop(_key(M, N, K, dtype, w_kn, epilogue), None)


# The one shortlist config that came close to the shortlist's best at each GEMM of Quack's full sweeps (the first
# config did not, at the tower shapes): the selection times it first, and the rest only where it comes close
# (docs/decisions.md#quack_epilogue_gemmprobe_config)
PROBE_CONFIG = SM90_SHORTLIST[4]
# how much the rest of the shortlist may improve on the probe (measured: at most 2.5 %), with room to spare
PROBE_SLACK = 1.05


def probe_config(device: torch.device, epilogue: Epilogue) -> Optional[dict]:
    """The config to time first at a GEMM with this epilogue (None: no shortlist on this GPU, tune at once)."""
    if device.type != "cuda":
        return None
    shortlist = _shortlist(device, epilogue)
    return dict(PROBE_CONFIG) if PROBE_CONFIG in shortlist and len(shortlist) > 1 else None

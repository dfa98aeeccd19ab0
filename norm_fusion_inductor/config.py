"""The plugin's configuration: which fusions run, how the implementation is chosen, what is logged.

Given to the backend as ``options={"norm_fusion": {...}}`` or to :func:`norm_fusion_inductor.inductor_options`.
Unknown names and wrong types raise at once, naming the option.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping

# Every family there is, all on by default. Regrouped normalization takes the pre-norm sites (the norm in the
# epilogues of the GEMMs around it); the post-norm family (matmul_norm) the norms after a matmul it leaves.
KNOWN_FUSIONS = ("regrouped_norm", "matmul_norm", "norm_attention")
FUSIONS = KNOWN_FUSIONS
# Fusions of earlier releases, with what replaced them: named in the error a config that still asks for them gets.
REMOVED_FUSIONS = {
    "rms_norm_matmul": "the pre-norm k-loop prologue was removed (it took no site at policy auto on the H200; "
                       "docs/decisions.md#configfusions); 'regrouped_norm' fuses RMSNorm into the GEMMs around it",
    "layer_norm_matmul": "the pre-norm k-loop prologue was removed (it took no site at policy auto on the H200; "
                         "docs/decisions.md#configfusions); 'regrouped_norm' fuses LayerNorm into the GEMMs around "
                         "it",
}
POLICIES = ("auto", "always", "never")
GEMM_BACKENDS = ("triton", "quack")
LAUNCHES = ("direct", "op")


@dataclasses.dataclass(frozen=True)
class NormFusionConfig:
    #: fusions to run, from ``KNOWN_FUSIONS`` (``FUSIONS`` by default)
    fusions: tuple = FUSIONS
    #: "auto": a site is rewritten only where the fused kernel measured faster than the unfused path (at compile
    #: time, cached); "always": rewrite every supported site; "never": rewrite nothing, only report the sites
    policy: str = "auto"
    #: with policy "auto", the fused kernel must beat the unfused lower bound by this factor. The bound (cuBLAS plus
    #: a copy of the bytes fusing saves, timed on the SMs) sits close to torch.compile's time, so a small margin
    #: suffices; at 1.1 the regrouped rewrite declined most of the transformer-layer sites it takes at 1.05. The
    #: post-norm keeps its calibrated 1.1 as a floor (selection.POST_NORM_MIN_SPEEDUP), attention
    #: sites 1.25; see docs/decisions.md#confignormfusionconfigmin_speedup
    min_speedup: float = 1.05
    #: with policy "auto", where the unfused alternative itself is compiled and timed side by side with the fused
    #: op (the attention block, in a child process: selection.choose_attention), the factor the fused op must win
    #: by. Timed alone, the block hides what a real graph gains by fusing the block's neighbours into its unfused
    #: kernels (a loss into the RMSNorm's forward and backward), which the opaque op cannot, so a block that wins
    #: alone can lose in its training step; see docs/decisions.md#confignormfusionconfigcompiled_min_speedup
    compiled_min_speedup: float = 1.15
    #: with policy "auto", a post-norm site the lower bound leaves undecided (the fused kernel faster than the
    #: bound but not by min_speedup) is compiled both ways (torch.compile default, and this plugin fusing it) in a
    #: child process and timed side by side (selection._compiled_check); fused if that wins by
    #: compiled_min_speedup. The bound counts the norm as a copy (Inductor's norms are slower than that), so near
    #: misses can be real wins. Costs a child compile (20-60 s) per such site on a cold cache (the choice is
    #: cached on disk). Off by default: on the transformer layers it declined every site it was asked about and
    #: took a large share of the first compile; off, a near miss stays unfused. See
    #: docs/decisions.md#confignormfusionconfigcompiled_check
    compiled_check: bool = False
    #: how a fused site runs: "direct": its Triton kernels are inserted into the graph and launched by
    #: Inductor's generated code; "op": through the opaque custom op (a Python call per step). Sites the direct
    #: launch cannot take use the op either way: eps as a tensor; dynamic M for the post-norm (the regrouped
    #: GEMMs take one dynamic leading dim)
    launch: str = "direct"
    #: with launch "op" and policy "auto", a fused site must keep at least this much GPU time per call (ms),
    #: unless Inductor runs the graph under CUDA graphs: the op is called through Python, which costs the host
    #: ~0.1–0.15 ms per call on the H200 machine (measured), so shorter kernels would leave the GPU waiting.
    #: The regrouped GEMMs on Quack are always such a call; on Triton with launch "direct" they are not (their
    #: weight fold per call is a direct launch too: ``kernels.weight_fold``)
    min_kernel_ms: float = 0.15
    #: a regrouped GEMM launched directly must save at least this much GPU time per call (ms; its unfused bound
    #: minus its time), unless Inductor runs the graph under CUDA graphs: a fused site adds launches to the step
    #: (the fold, the statistics, the GEMM through Triton's launcher), measured +0.04–0.06 ms of host per site in
    #: the LN tower and +0.15 ms in GPT-2-medium's layer, which a host-bound step pays. The two sites measured to
    #: slow their blocks saved under 0.01 ms; every fused site that sped its block up saved 0.054 ms or more
    #: (docs/decisions.md#selection_pays_its_host)
    min_direct_saving_ms: float = 0.04
    #: the GEMM implementations a regrouped chain may run on, timed per GEMM with policy "auto" (the fastest that
    #: passes the margin wins): "triton" (the portable kernel) and "quack" (Quack's CuTe-DSL GEMM, Hopper and
    #: Blackwell, used only where quack-kernels is installed: ``pip install norm_fusion_inductor[cute]``)
    gemm_backends: tuple = GEMM_BACKENDS
    #: with policy "auto", on a GPU model the cost model has constants for (``cost_model.calibration``: committed
    #: for the H200, measured by ``python -m norm_fusion_inductor calibrate`` for another), a regrouped
    #: GEMM backend whose predicted time, divided by this factor, still misses the measured unfused bound by
    #: min_speedup (or, for Quack, with its op call's host time, does not beat Triton's measured price) is not
    #: compiled or timed: a clear loss costs no JIT. At 1.15, of the 385 backend timings logged on the H200 none
    #: would have been screened wrongly with constants fitted without their shape (44 screened), two with
    #: constants fitted on the first 29 records alone (``benchmarks/cost_model.py``). 0 turns the cost model off
    #: (every backend timed, no clear win taken untimed either)
    model_margin: float = 1.15
    #: with ``model_margin`` on, where the pass launches the Triton kernel itself: a GEMM of 1.9 waves or more whose
    #: predicted time (plus the weight fold) times this factor still beats the measured bound by min_speedup (and
    #: that Quack could not beat) runs its untuned default config, neither compiled nor timed in the pass — a
    #: clear win (selection._decided_by_model); Inductor compiles it once, with the graph's other kernels. At
    #: 1.1, none of the 40 GEMMs taken so with constants fitted without their shape (or their block, or on the
    #: first 29 records alone) measured under 1.13x its bound (``benchmarks/cost_model.py``). 0: every win timed
    model_win_margin: float = 1.1
    #: with policy "auto", the seconds of Quack JIT (compiling and timing its configs, 5-10 s each on the H200)
    #: that one run of the pass over a graph may spend; once spent, no further Quack GEMM is compiled in that
    #: run: its sites are decided with the other backends, and their measurements are pending (not stored), so a
    #: later run of the pass times Quack there (see ``revisit_pending``). Without it a tower's first
    #: compile took 34.8 s against torch.compile's 5.0 (docs/decisions.md#confignormfusionconfigquack_jit_budget_s)
    quack_jit_budget_s: float = 5.0
    #: with policy "auto", the seconds that one run of the pass over a graph may spend compiling and timing the
    #: Triton kernels of the close calls (sites the cost model does not call a clear win or loss: about 1-3 s
    #: each, the Triton JIT of one config) and of the post-norm sites; once spent, the sites left stay unfused in that compile and their
    #: measurements are kept pending: the next run of the pass times them (see ``revisit_pending``). The first
    #: measured site always runs; another starts only where one as long as the last still fits the budget.
    #: ``float("inf")``: no bound
    measure_budget_s: float = 3.0
    #: with policy "auto", whether a measurement left pending by a budget (``measure_budget_s``,
    #: ``quack_jit_budget_s``) makes Inductor's FX graph cache miss, so that the next compile runs the pass again
    #: and completes it (for an hour at most). False: a warm compile is served from the cache as torch.compile's
    #: is, and a pending site is measured the next time the pass runs for another reason (a new graph, shape or
    #: cache); its site stays unfused until then. True trades warm compiles (the pass's time again, each
    #: compile, until nothing is pending) for the sites the first compile had no budget for
    revisit_pending: bool = False
    #: inference: each regrouped consumer's weight-side operands (W·γ, a gated pair's interleaved weight, and
    #: LayerNorm's u = Σ_k W·γ and v = Wβ + b) are computed once and kept while the parameters are unchanged in
    #: place, instead of once per call (a pass over each weight).
    #: Costs one copy of each such weight in memory. Training and CUDA graphs fold per call whatever this says
    cache_folded_weights: bool = True
    #: log every site (rewritten or not, and why) to the ``norm_fusion_inductor`` logger at INFO;
    #: the environment variable NORM_FUSION_LOG=1 does the same
    log: bool = False
    #: also log each graph after the rewrite
    log_graph: bool = False
    #: where measured choices are cached across processes; None: ~/.cache/norm_fusion_inductor
    cache_dir: Any = None

    def __post_init__(self) -> None:
        _check_type("fusions", self.fusions, (tuple, list, frozenset, set))
        object.__setattr__(self, "fusions", tuple(self.fusions))
        for name in self.fusions:
            if name in REMOVED_FUSIONS:
                raise ValueError(f"norm_fusion option 'fusions': {name!r} no longer exists: {REMOVED_FUSIONS[name]}")
            if name not in KNOWN_FUSIONS:
                raise ValueError(f"norm_fusion option 'fusions': unknown fusion {name!r}; "
                                 f"known: {', '.join(KNOWN_FUSIONS)}")
        _check_type("gemm_backends", self.gemm_backends, (tuple, list))
        object.__setattr__(self, "gemm_backends", tuple(self.gemm_backends))
        for name in self.gemm_backends:
            if name not in GEMM_BACKENDS:
                raise ValueError(f"norm_fusion option 'gemm_backends': unknown backend {name!r}; "
                                 f"known: {', '.join(GEMM_BACKENDS)}")
        _check_type("policy", self.policy, str)
        if self.policy not in POLICIES:
            raise ValueError(f"norm_fusion option 'policy' must be one of {POLICIES}, got {self.policy!r}")
        _check_type("launch", self.launch, str)
        if self.launch not in LAUNCHES:
            raise ValueError(f"norm_fusion option 'launch' must be one of {LAUNCHES}, got {self.launch!r}")
        _check_type("min_speedup", self.min_speedup, (int, float))
        if self.min_speedup <= 0:
            raise ValueError(f"norm_fusion option 'min_speedup' must be > 0, got {self.min_speedup}")
        _check_type("compiled_min_speedup", self.compiled_min_speedup, (int, float))
        if self.compiled_min_speedup <= 0:
            raise ValueError(f"norm_fusion option 'compiled_min_speedup' must be > 0, got {self.compiled_min_speedup}")
        for name in ("model_margin", "model_win_margin"):
            _check_type(name, getattr(self, name), (int, float))
            if getattr(self, name) < 0 or 0 < getattr(self, name) < 1:
                raise ValueError(f"norm_fusion option '{name}' must be 0 (off) or >= 1, got {getattr(self, name)}")
        for name in ("quack_jit_budget_s", "measure_budget_s"):
            _check_type(name, getattr(self, name), (int, float))
            if getattr(self, name) < 0:
                raise ValueError(f"norm_fusion option '{name}' must be >= 0, got {getattr(self, name)}")
        for name in ("min_kernel_ms", "min_direct_saving_ms"):
            _check_type(name, getattr(self, name), (int, float))
            if getattr(self, name) < 0:
                raise ValueError(f"norm_fusion option '{name}' must be >= 0, got {getattr(self, name)}")
        for flag in ("log", "log_graph", "compiled_check", "cache_folded_weights", "revisit_pending"):
            _check_type(flag, getattr(self, flag), bool)
        if self.cache_dir is not None:
            _check_type("cache_dir", self.cache_dir, (str, os.PathLike))

    @classmethod
    def from_any(cls, value: "NormFusionConfig | Mapping[str, Any] | None") -> "NormFusionConfig":
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if not isinstance(value, Mapping):
            raise TypeError(f"norm_fusion options must be a dict or NormFusionConfig, got {type(value).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ValueError(f"unknown norm_fusion option(s) {', '.join(map(repr, unknown))}; "
                             f"known options: {', '.join(sorted(known))}")
        return cls(**value)

    @property
    def cache_root(self) -> str:
        """The folder of the plugin's caches: ``cache_dir``, or ~/.cache/norm_fusion_inductor."""
        return os.fspath(self.cache_dir) if self.cache_dir is not None else os.path.join(
            os.path.expanduser("~"), ".cache", "norm_fusion_inductor")

    @property
    def logging_enabled(self) -> bool:
        return self.log or self.log_graph or os.environ.get("NORM_FUSION_LOG", "0") not in ("", "0")


def _check_type(name: str, value: Any, types) -> None:
    if isinstance(value, bool) and types in (int, float, (int, float)):
        raise TypeError(f"norm_fusion option {name!r} must be a number, got bool")
    if not isinstance(value, types):
        want = types.__name__ if isinstance(types, type) else " or ".join(t.__name__ for t in types)
        raise TypeError(f"norm_fusion option {name!r} must be {want}, got {type(value).__name__} ({value!r})")

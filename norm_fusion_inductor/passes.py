"""The Inductor graph pass that runs the pattern families, and the Inductor options that install it.

The pass runs as ``joint_custom_post_pass``: on the joint forward+backward graph in training and on the forward
graph at inference, after Inductor's own joint-graph cleanups, in aten IR. It is a ``CustomGraphPass`` whose
``uuid()`` hashes the plugin's sources and the config, so the FX graph cache keeps working and is invalidated when
either changes.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import pathlib
from typing import Any, Optional

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass
from torch._inductor.pattern_matcher import stable_topological_sort

from . import report
from .config import NormFusionConfig

_PACKAGE_DIR = pathlib.Path(__file__).resolve().parent
_GRAPH_COUNTER = itertools.count()
_JOINT_RUN_COUNT = 0  # how often the joint-stage pass ran: a graph served from a cache does not run it


def joint_runs() -> int:
    return _JOINT_RUN_COUNT


def new_graph_id() -> int:
    return next(_GRAPH_COUNTER)


class PassContext:
    """State of one run of the pass over one graph: the config, the backward-only nodes, the site records."""

    def __init__(self, graph: torch.fx.Graph, config: NormFusionConfig, stage: str = "joint"):
        from norm_fusion_inductor.patterns.common import backward_only_nodes

        self.graph_id = next(_GRAPH_COUNTER)
        self.graph = graph
        self.config = config
        self.stage = stage
        self.backward = backward_only_nodes(graph)
        self.sites: list[report.SiteRecord] = []
        self.claimed: set = set()  # normalized-output nodes a family rewrote: later families leave them alone
        self.covered: set = set()  # nodes of the norms some family recorded (the rest are reported at the end)
        self.regrouped_sites: list = []  # norms whose consumers the regrouped rewrite took (their producer next)

    @functools.cached_property
    def static_inputs(self) -> Optional[set]:
        """The placeholders that are parameters or buffers (AOTAutograd's static inputs), or None where the
        compile does not say (no tracing context, or one that describes another graph)."""
        context = torch._guards.TracingContext.try_get()
        meta = getattr(context, "fw_metadata", None)
        indices = getattr(meta, "static_input_indices", None)
        placeholders = list(self.graph.find_nodes(op="placeholder"))
        if indices is None or len(getattr(meta, "input_info", ())) != len(placeholders):
            return None
        return {placeholders[i] for i in indices}

    def site(self, fusion: str, pattern: str, node: torch.fx.Node) -> report.SiteRecord:
        return report.SiteRecord(self.graph_id, fusion, pattern, node.name, rewritten=False, reason="",
                                 stage=self.stage)

    def reject(self, site: report.SiteRecord, reason: str,
               implementation: str = report.Implementation.UNFUSED) -> None:
        site.reason, site.implementation = reason, implementation
        self._record(site)

    def accept(self, site: report.SiteRecord, implementation: str, reason: str) -> None:
        site.rewritten, site.implementation, site.reason = True, implementation, reason
        self._record(site)

    def _record(self, site: report.SiteRecord) -> None:
        self.sites.append(site)

    def finish(self) -> None:
        """Log the sites, one record per norm: the rewrite if a family (pre- or post-norm) made one, else the
        first family's record with every family's reason."""
        by_node: dict = {}
        for site in self.sites:
            by_node.setdefault(site.node, []).append(site)
        self.sites = []
        for records in by_node.values():
            rewritten = [s for s in records if s.rewritten]
            if rewritten:
                self.sites += rewritten
                continue
            site = records[0]
            reasons = [f"{s.kind}: {s.reason}" for s in records]
            if len(set(s.reason for s in records)) > 1:
                site.reason = "; ".join(reasons)
            self.sites.append(site)
        for site in self.sites:
            report.record(site, emit=self.config.logging_enabled)


@functools.lru_cache(maxsize=None)
def _source_hash() -> str:
    h = hashlib.sha256()
    from norm_fusion_inductor import patterns

    roots = [_PACKAGE_DIR, pathlib.Path(patterns.__file__).resolve().parent]
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            h.update(path.name.encode())
            h.update(path.read_bytes())
    return h.hexdigest()


class NormFusionPass(CustomGraphPass):
    """Runs the enabled pattern families of its stage; then the pass the user had installed, if any."""

    STAGE = "joint"  # joint_custom_post_pass: aten IR, forward and backward in one graph

    def __init__(self, config: Optional[NormFusionConfig] = None, chained: Any = None):
        self.config = NormFusionConfig.from_any(config)
        self.chained = chained

    def __call__(self, graph: torch.fx.Graph) -> None:
        from norm_fusion_inductor.patterns import STAGES

        if self.config.logging_enabled:
            report.enable_logging()
        if self.STAGE == "joint":
            global _JOINT_RUN_COUNT
            _JOINT_RUN_COUNT += 1
        from norm_fusion_inductor import selection
        from norm_fusion_inductor.patterns.common import report_leftover_norms
        from norm_fusion_inductor.patterns.tracing import pattern_cache_root

        before = report.seconds()
        ctx = PassContext(graph, self.config, self.STAGE)
        # pre-norm sites first: the post-norm takes what is left
        steps = [step for fusion, step in STAGES[self.STAGE] if fusion in self.config.fusions]
        with report.clocked("pass"), pattern_cache_root(self.config.cache_root), \
                selection.measurement_budgets(self.config.quack_jit_budget_s, self.config.measure_budget_s):
            for step in steps:
                step.apply(graph, ctx)
            if self.STAGE == "joint":
                report_leftover_norms(graph, ctx)
        ctx.finish()
        if ctx.sites:
            spent = report.format_seconds(report.seconds_since(before))
            (report.log.info if self.config.logging_enabled else report.log.debug)(
                "[graph %d] %s stage: %s", ctx.graph_id, self.STAGE, spent)
        if ctx.sites and any(s.rewritten for s in ctx.sites) and self.STAGE == "joint":
            # readers of the statistics may sit between the norm and the first matmul, before the fused op
            stable_topological_sort(graph)
            graph.eliminate_dead_code()
        if ctx.sites and any(s.rewritten for s in ctx.sites) and self.config.log_graph:
            report.log.info("[graph %d] after norm_fusion (%s):\n%s", ctx.graph_id, self.STAGE, graph)
        if self.chained is not None:
            self.chained(graph)

    def uuid(self) -> Optional[Any]:
        chained_id = None
        if self.chained is not None:
            if not isinstance(self.chained, CustomGraphPass):
                return None  # an opaque user pass: Inductor must bypass its cache, as it would without us
            chained_id = self.chained.uuid()
            if chained_id is None:
                return None
        from . import selection
        from .kernels import tuning

        # with revisit_pending, a measurement left for a later compile (the budgets) must reach the pass, not the
        # FX graph cache
        pending = selection.pending_token(self.config) if self.config.revisit_pending else ""
        return (f"norm_fusion:{self.STAGE}:{_source_hash()}:{self.config!r}:{tuning.current()!r}:{chained_id!r}"
                f":{pending}")


class NormFusionPreGradPass(NormFusionPass):
    """The families matched in the torch-level graph before autograd (``pre_grad_custom_pass``), so that
    training runs their ops' own backward: norm → attention → norm. The graph is not functional here; the
    families erase only the nodes they replaced (no dead-code elimination, which would drop in-place calls)."""

    STAGE = "pre_grad"


def inductor_options(config: "NormFusionConfig | dict | None" = None, **config_kwargs) -> dict:
    """Inductor config entries that install the plugin's passes, for ``torch.compile(options=...)`` or
    ``torch._inductor.config.patch(...)``. Passes already set in Inductor's config run after ours.

        torch.compile(model, options=norm_fusion_inductor.inductor_options(policy="auto"))
    """
    if config is not None and config_kwargs:
        raise TypeError("give either a config or keyword options, not both")
    cfg = NormFusionConfig.from_any(config if config is not None else config_kwargs)
    return install(cfg, {})


def install(config: NormFusionConfig, patches: dict) -> dict:
    """``patches`` (Inductor config entries) with the plugin's passes installed in front of the user's own."""
    patches = dict(patches)
    for key, cls in (("joint_custom_post_pass", NormFusionPass), ("pre_grad_custom_pass", NormFusionPreGradPass)):
        existing = patches.get(key, getattr(torch._inductor.config, key))
        patches[key] = cls(config, chained=unwrap_user_pass(existing))
    return patches


def unwrap_user_pass(existing):
    """Installing twice must not run the families twice: keep only what the user had before us."""
    while isinstance(existing, NormFusionPass):
        existing = existing.chained
    return existing


@contextlib.contextmanager
def enabled(config: "NormFusionConfig | dict | None" = None, **config_kwargs):
    """Context manager: every torch.compile (Inductor) call inside runs the plugin's pass."""
    with torch._inductor.config.patch(inductor_options(config, **config_kwargs)):
        yield

"""The ``norm_fusion`` torch.compile backend: Inductor with the plugin's pass installed.

    torch.compile(model, backend="norm_fusion")
    torch.compile(model, backend="norm_fusion", mode="max-autotune")
    torch.compile(model, backend="norm_fusion", options={"norm_fusion": {"log": True}, "max_autotune": True})

Registered under the ``torch_dynamo_backends`` entry point, so it works without importing this package.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from . import passes, report
from .config import NormFusionConfig
from .passes import install


def norm_fusion_backend(gm: torch.fx.GraphModule, example_inputs, *, mode: Optional[str] = None,
                        options: Optional[dict[str, Any]] = None):
    from torch._inductor import list_mode_options
    from torch._inductor.compile_fx import compile_fx

    if options is not None and not isinstance(options, dict):
        raise TypeError(f"norm_fusion backend: options must be a dict, got {type(options).__name__}")
    options = dict(options or {})
    config = NormFusionConfig.from_any(options.pop("norm_fusion", None))
    patches: dict[str, Any] = dict(list_mode_options(mode)) if mode else {}
    patches.update(options)
    patches = install(config, patches)
    _warm_compile_workers()  # once the configuration is known good
    # a graph served from Inductor's caches skips the joint pass: its site records are kept and replayed
    key = _records_key(gm, example_inputs, patches)
    runs, count = passes.joint_runs(), report.recorded_count()
    compiled = compile_fx(gm, example_inputs, config_patches=patches)
    if key is not None:
        if passes.joint_runs() != runs:
            report.save_graph_sites(config.cache_root, key, report.since(count))
        else:
            if config.logging_enabled:
                report.enable_logging()
            report.replay_graph_sites(config.cache_root, key, passes.new_graph_id(), config.logging_enabled)
    return compiled


def _warm_compile_workers() -> None:
    """Start Inductor's compile workers now, as its own ``inductor`` backend does before tracing: the pool takes
    seconds to come up, and until it is ready Inductor compiles each kernel on the main thread, one after
    another. Calling ``compile_fx`` directly skips that warm-up. Honours ``TORCH_WARM_POOL=0``."""
    try:
        from torch._inductor.async_compile import maybe_warm_pool
    except ImportError:  # a torch without it: the pool starts at the first kernel, as before
        return
    maybe_warm_pool()


def _records_key(gm, example_inputs, patches) -> Optional[str]:
    """The key the graph's site records are kept under; None where they cannot be (an opaque user pass makes
    Inductor bypass its caches anyway), or where the key cannot be made: a report never breaks a compile."""
    pass_uuid = patches["joint_custom_post_pass"].uuid()
    if pass_uuid is None:
        return None
    try:
        return report.graph_key(gm, example_inputs, pass_uuid)
    except Exception:
        return None

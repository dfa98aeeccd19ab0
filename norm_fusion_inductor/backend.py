"""The ``norm_fusion`` torch.compile backend: Inductor with the plugin's pass installed.

    torch.compile(model, backend="norm_fusion")
    torch.compile(model, backend="norm_fusion", mode="max-autotune")
    torch.compile(model, backend="norm_fusion", options={"norm_fusion": {"log": True}, "max_autotune": True})

Registered under the ``torch_dynamo_backends`` entry point, so it works without importing this package.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

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
    return compile_fx(gm, example_inputs, config_patches=install(config, patches))

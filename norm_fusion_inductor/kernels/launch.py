"""Repeated Triton launches without the JIT's per-call work.

``kernel[grid](*args, **meta)`` binds the arguments, computes the specialization key, looks the compiled kernel
up and builds launch metadata on every call: host time that a small kernel cannot hide
(docs/decisions.md#launchcached_launch). ``cached_launch`` does that once per launch key and afterwards calls the
compiled kernel's launcher (``CompiledKernel.run``, the C launcher that also allocates Triton's global scratch)
directly.
"""

from __future__ import annotations

import torch
import triton

# launchers by everything Triton specializes a launch on (see cached_launch)
LAUNCHERS: dict = {}


def cached_launch(kernel, grid, args, meta, device, key_extra=()) -> None:
    """kernel[grid()](*args, **meta), the compiled kernel's launcher cached per launch key: the kernel, what the
    JIT specializes on (dtypes, each pointer's 16-byte alignment, integer arguments: exact values here; None
    arguments), the constexprs and launch options in ``meta`` (every constexpr after ``args`` must be there,
    defaults included), and ``key_extra`` (what else ``grid()`` depends on); float arguments are not specialized.
    ``grid()`` is evaluated when the key is new."""
    key = (kernel, device.index, tuple(meta.values()), key_extra,
           tuple((a.dtype, a.data_ptr() % 16 == 0) if isinstance(a, torch.Tensor) else
                 (a if isinstance(a, int) or a is None else type(a)) for a in args))
    launch = LAUNCHERS.get(key)
    if launch is not None and device.index == torch.cuda.current_device():  # a kernel's handle is per device
        launch(args)
        return
    with torch.cuda.device(device):
        compiled = kernel[grid()](*args, **meta)
    if len(LAUNCHERS) > 4096:  # eager callers with ever new shapes: the JIT keeps its own cache anyway
        LAUNCHERS.clear()
    # the compiled kernel takes every parameter in signature order: the arguments, then the constexprs
    constexprs = tuple(meta[name] for name in kernel.arg_names[len(args):])
    LAUNCHERS[key] = _direct_launcher(compiled.result() if hasattr(compiled, "result") else compiled, grid(),
                                      constexprs, device.index)


def _direct_launcher(compiled, grid, constexprs, device_index):
    hooks = triton.knobs.runtime
    # the compiled launcher takes exactly three grid dimensions: a 1-D grid (the row kernels') given as such made it
    # two arguments short ("function takes exactly 22 arguments (20 given)"); see
    # docs/decisions.md#launch_direct_launcher
    grid = tuple(grid) + (1,) * (3 - len(grid))

    def hooked(hook):  # Triton 3.6 keeps launch hooks in a (usually empty) chain
        return bool(getattr(hook, "calls", hook))

    def launch(args):
        stream = torch._C._cuda_getCurrentRawStream(device_index)
        if hooked(hooks.launch_enter_hook) or hooked(hooks.launch_exit_hook):  # a profiler listens: Triton's path
            compiled[grid](*args, *constexprs, stream=stream)
        else:
            compiled.run(*grid, stream, compiled.function, compiled.packed_metadata, None, None, None, *args,
                         *constexprs)

    return launch

import os

import pytest
import torch

# Without a GPU the Triton kernels run in the interpreter; Triton reads this when a kernel is defined, so it must
# be set before norm_fusion_inductor is imported.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


# Every test compiles for real: a warm FX-graph or AOTAutograd cache would skip the pass (and its site records).
# test_config.py turns the caches back on where it tests them. Inductor and Dynamo config is changed only through
# config.patch, never monkeypatch: pytest 9's monkeypatch undo deletes a config attribute, and every later
# torch._dynamo.reset() then raises.
# Inductor's CPU kernels are compiled without the vector-ISA probe and SIMD code: the tests check the rewrites, not
# the speed of the CPU code, and scalar C++ compiles ~20 % faster (a training test: 36 s -> 29 s).
@pytest.fixture(autouse=True, scope="session")
def _inductor_caches_off():
    with torch._inductor.config.patch({"force_disable_caches": True, "cpp.vec_isa_ok": False}):
        yield


@pytest.fixture
def poisoned_empty(monkeypatch):
    """Floating torch.empty / empty_like filled with NaN: outputs, partials and column partials that a kernel
    leaves unwritten, or reads before they are written, show up."""
    empty, empty_like = torch.empty, torch.empty_like

    def poison(t):
        return t.fill_(float("nan")) if t.is_floating_point() else t

    monkeypatch.setattr(torch, "empty", lambda *a, **k: poison(empty(*a, **k)))
    monkeypatch.setattr(torch, "empty_like", lambda *a, **k: poison(empty_like(*a, **k)))


@pytest.fixture
def kernel_tuning():
    """kernel_tuning(**changes): the kernels' variant record (kernels/tuning.py) changed for the rest of the test."""
    import contextlib

    from norm_fusion_inductor.kernels import tuning

    with contextlib.ExitStack() as stack:
        yield lambda **changes: stack.enter_context(tuning.override(**changes))

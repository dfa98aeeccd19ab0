"""Norm forms traced into Inductor patterns, and the traces kept on disk.

Patterns are traced from eager code with Inductor's own decompositions (``gen_pattern`` + ``fwd_only``), so they
meet the graph the way Inductor lowers it. Every intermediate node may have extra users: in a training graph the
backward reads the norm's intermediates, and a matched site decides for itself whether those users are served.

A trace depends on torch, on ``norm_forms.py`` and on this module alone (``TRACED_SOURCES``): the shipped traces
in ``traced/`` stay valid through edits of the families and their reports. After a change to either module,
``python -m norm_fusion_inductor trace-patterns`` with each shipped torch.
"""

from __future__ import annotations

import contextlib
import functools
import operator
import pathlib
from typing import Callable, Optional

import torch
from torch._inductor import pattern_matcher as pm

aten = torch.ops.aten

EPS_PLACEHOLDER = 7.77e-7  # a value no model uses, so the traced graph shows where eps goes
# One trace per cast structure: a pattern traced in a 16-bit dtype matches bf16 and fp16 graphs, not fp32 ones.
TRACE_DTYPES = {"half": torch.float16, "fp32": torch.float32}


def traced_norm_forms(forms: dict) -> list[tuple[str, pm.PatternExpr]]:
    """("form/dtype class", pattern) of each norm form (``NormFamily.forms``), traced once per dtype class; a
    trace equal to an earlier one (the fp32 trace of a form whose casts vanish) is left out."""
    traced, seen = [], set()
    for form, (fn, param_dtypes) in forms.items():
        for dtype_name, dtype in TRACE_DTYPES.items():
            def trace(fn=fn, param_dtypes=param_dtypes, dtype=dtype):
                inputs = [torch.empty(4, 16, dtype=dtype)]
                inputs += [torch.empty(16, dtype=dtype if d == "input" else d) for d in param_dtypes]
                return pm.gen_pattern(fn, inputs, _trace_functional, {"eps": EPS_PLACEHOLDER})

            pattern = cached_pattern(f"norm/{fn.__module__}.{fn.__qualname__}/{param_dtypes}/{dtype_name}", trace)
            _allow_extra_users(pattern)
            if repr(pattern) not in seen:
                seen.add(repr(pattern))
                traced.append((f"{form}/{dtype_name}", pattern))
    return traced


# --- traced patterns kept on disk ---------------------------------------------------------------------------------
# Tracing the forms costs about 1.5 s per process (64 traces through make_fx and Inductor's decompositions). A
# trace is kept as the Python code Inductor's own serialized patterns are written in (``PatternPrettyPrinter``)
# and read back in milliseconds: shipped with the package for the torch versions in ``traced/`` (as Inductor ships
# its ``serialized_patterns``; ``python -m norm_fusion_inductor trace-patterns`` writes the running torch's), else
# kept in one file per torch version and pattern sources under the config's cache folder. Only code that reads
# back to the same pattern is kept; a shipped file traced from other pattern sources is not read.

_PATTERN_FILE_VERSION = 1
_PATTERN_ROOT = {"root": None}  # the cache folder of the pass's current run (None: the config's default)
_PATTERN_CODE: dict = {}  # pattern file -> {key: code}, as read or written by this process
SHIPPED_TRACES = pathlib.Path(__file__).resolve().parent / "traced"


@contextlib.contextmanager
def pattern_cache_root(root: Optional[str]):
    """Traces made inside are kept in (and read from) ``root``'s pattern cache."""
    saved = _PATTERN_ROOT["root"]
    _PATTERN_ROOT["root"] = root
    try:
        yield
    finally:
        _PATTERN_ROOT["root"] = saved


# the modules a trace depends on besides torch: the forms and this tracer (edits elsewhere keep the traces)
TRACED_SOURCES = ("norm_forms.py", "tracing.py")


@functools.lru_cache(maxsize=None)
def pattern_sources_digest() -> str:
    """A digest of what a trace depends on besides torch: ``TRACED_SOURCES`` and the file format."""
    import hashlib

    h = hashlib.sha256(str(_PATTERN_FILE_VERSION).encode())
    for name in TRACED_SOURCES:
        h.update(name.encode())
        h.update((pathlib.Path(__file__).resolve().parent / name).read_bytes())
    return h.hexdigest()[:24]


def shipped_traces_file() -> pathlib.Path:
    """The shipped traces of the running torch release (its decompositions; the local build tag aside)."""
    return SHIPPED_TRACES / f"torch-{torch.__version__.split('+')[0]}.json"


def _cache_file() -> pathlib.Path:
    import hashlib

    from norm_fusion_inductor.config import NormFusionConfig

    root = _PATTERN_ROOT["root"] or NormFusionConfig().cache_root
    digest = hashlib.sha256(f"{torch.__version__}|{pattern_sources_digest()}".encode()).hexdigest()[:24]
    return pathlib.Path(root) / "patterns" / f"{digest}.json"


def _codes(path: pathlib.Path, shipped: bool = False) -> dict:
    """{key: code} of a pattern file, read once per process; a shipped file only where it was traced from these
    pattern sources."""
    import json

    if path not in _PATTERN_CODE:
        try:
            data = json.loads(path.read_text())
            if shipped:
                data = data["patterns"] if data.get("sources") == pattern_sources_digest() else {}
            _PATTERN_CODE[path] = dict(data)
        except (OSError, ValueError, TypeError, KeyError):
            _PATTERN_CODE[path] = {}
    return _PATTERN_CODE[path]


@functools.lru_cache(maxsize=None)
def _pattern_namespace() -> dict:
    """The names the printed patterns use (as the header of Inductor's serialized pattern files provides)."""
    names = {name: getattr(pm, name) for name in dir(pm)
             if isinstance(getattr(pm, name), type) and issubclass(getattr(pm, name), (pm.PatternExpr, pm._TargetExpr))}
    return dict(names, torch=torch, operator=operator, aten=torch.ops.aten, prims=torch.ops.prims)


def _read_pattern(code: str) -> pm.PatternExpr:
    namespace = dict(_pattern_namespace())
    exec(compile(code, "<norm_fusion pattern cache>", "exec"), namespace)  # noqa: S102 (our own cache's code)
    return namespace["pattern"]


def cached_pattern(key: str, trace: Callable[[], pm.PatternExpr]) -> pm.PatternExpr:
    """``trace()``'s pattern, a new object each call (callers set its users): read from the shipped traces or
    the pattern cache where an earlier trace of ``key`` was kept, else traced now and kept in the cache."""
    import json
    import os

    from norm_fusion_inductor import report

    path = _cache_file()
    codes = _codes(path)
    for known in (_codes(shipped_traces_file(), shipped=True), codes):
        if key in known:
            try:
                return _read_pattern(known[key])
            except Exception:  # written by something else: trace again
                del known[key]
    with report.clocked("pattern tracing"):
        pattern = trace()
    try:
        code = pm.PatternPrettyPrinter.run(pattern, "pattern")
        if repr(_read_pattern(code)) != repr(pattern):
            return pattern
    except Exception:  # a pattern the printer does not cover stays traced per process
        return pattern
    codes[key] = code
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(codes, indent=0))
        tmp.replace(path)
    except OSError:
        pass  # a read-only cache folder only costs the trace next time
    return pattern


def write_shipped_traces(trace_all: Callable[[], None], path: Optional[pathlib.Path] = None) -> pathlib.Path:
    """Trace every pattern afresh (``trace_all()``, in a process that has traced none yet) and write them as the
    running torch's shipped traces file (or to ``path``)."""
    import json
    import tempfile

    with tempfile.TemporaryDirectory() as root:
        _PATTERN_CODE[shipped_traces_file()] = {}  # read nothing shipped: every pattern is traced now
        with pattern_cache_root(root):
            trace_all()
            codes = _codes(_cache_file())
    path = pathlib.Path(path) if path is not None else shipped_traces_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"torch": torch.__version__, "sources": pattern_sources_digest(),
                                "patterns": dict(sorted(codes.items()))}, indent=0) + "\n")
    _PATTERN_CODE.pop(path, None)
    return path


def _trace_functional(fn: Callable, args, **kwargs) -> torch.fx.GraphModule:
    """``fwd_only``, with in-place aten ops swapped for their functional forms: some decompositions use them
    (F.rms_norm's ``add_``), and AOTAutograd's functionalization removes them before our pass sees the graph.
    Only valid for patterns whose in-place ops write fresh intermediates, as norms do."""
    gm = pm.fwd_only(fn, args, **kwargs)
    for node in gm.graph.nodes:
        target = node.target
        if isinstance(target, torch._ops.OpOverload) and target._schema.name.endswith("_"):
            packet = getattr(aten, target._schema.name.split("::")[-1][:-1], None)
            if packet is not None and hasattr(packet, target._overloadname):
                node.target = getattr(packet, target._overloadname)
    gm.recompile()
    return gm


def _allow_extra_users(pattern: pm.PatternExpr) -> None:
    seen = set()
    stack = [pattern]
    while stack:
        p = stack.pop()
        if id(p) in seen:
            continue
        seen.add(id(p))
        if isinstance(p, pm._TargetArgsExpr):
            p.users = pm.MULTIPLE
            stack.extend(a for a in p.flat_args_kwargs[0] if isinstance(a, pm.PatternExpr))

"""Where BERT's first loss turns NaN with policy always (convergence.py, bf16, H200): the variants below in one
process, and with launch "op" every epilogue GEMM checked against its fp32 torch reference (NaN in its inputs or
outputs, relative error); then every block config of each GEMM seen, against the same reference."""
import collections
import sys

import torch

sys.path.insert(0, "benchmarks")
import norm_fusion_inductor as nfi
from convergence import batches
from norm_fusion_inductor import regrouped
from norm_fusion_inductor.hf_models import VOCAB, tiny_model
from norm_fusion_inductor.kernels import epilogue_gemm as eg
from norm_fusion_inductor.kernels import tuning

for arg in sys.argv:  # cap=GB: the process's memory capped (a GPU shared with other processes, as in call_a)
    if arg.startswith("cap="):
        torch.cuda.set_per_process_memory_fraction(
            float(arg[4:]) * 2**30 / torch.cuda.get_device_properties(0).total_memory)
LAYERS = int(sys.argv[1]) if len(sys.argv) > 1 else 2
KW = dict(hidden=768, layers=LAYERS, intermediate_size=3072, max_position_embeddings=512)
torch.manual_seed(0)
state = {k: v.clone() for k, v in tiny_model("bert", **KW).train().state_dict().items()}
(ids, labels), = batches(1, 16, 512, VOCAB, "cuda", encoder=True)
SEEN = {}
QUIET = "quiet" in sys.argv  # only the GEMMs with nonfinite values or a large error
original = eg.epilogue_gemm


def rel(x, ref):
    return ((x.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30)).item()


def checked(a, w, *, epilogue, w_kn=False, residual=None, bias=None, scale=None, shift=None, u=None,
            residual_norm=None, head_norm=None, config=None):
    out, aux, part = original(a, w, epilogue=epilogue, w_kn=w_kn, residual=residual, bias=bias, scale=scale,
                              shift=shift, u=u, residual_norm=residual_norm, head_norm=head_norm, config=config)
    torch.cuda.synchronize()
    ins = {n: t for n, t in dict(a=a, w=w, residual=residual, bias=bias, scale=scale, shift=shift, u=u).items()
           if t is not None}
    nan_in = [n for n, t in ins.items() if not torch.isfinite(t).all()]
    ref = regrouped.reference(a, w, bias, residual, scale, shift, u, epilogue, w_kn, residual_norm, head_norm)
    errs = [f"{rel(x, r):.1e}" + ("(nonfinite)" if not torch.isfinite(x).all() else "")
            for x, r in zip((out, aux, part), ref) if x.numel() and r.numel()]
    key = (epilogue, tuple(a.shape), tuple(w.shape), a.dtype, w_kn)
    if key not in SEEN:
        SEEN[key] = dict(a=a.clone(), w=w.clone(), residual=residual, bias=bias, scale=scale, shift=shift, u=u,
                         residual_norm=residual_norm, head_norm=head_norm)
    if nan_in or any("nonfinite" in e or float(e) > 1e-2 for e in errs) or not QUIET:
        print(f"  gemm {tuple(a.shape)}x{tuple(w.shape)} {epilogue} nonfinite inputs {nan_in} rel err {errs} "
              f"config {eg.tuned_for(a.shape[0], w.shape[1 if w_kn else 0], a.shape[1], a.dtype, w_kn, epilogue)}",
              flush=True)
    return out, aux, part


def step(options, train=True, wrap=False):
    torch._dynamo.reset()
    nfi.clear_reports()
    model = tiny_model("bert", **KW).train(train)
    model.load_state_dict(state)
    model.to("cuda", torch.bfloat16)
    compiled = torch.compile(model, backend="norm_fusion", options={"norm_fusion": options})
    eg.epilogue_gemm = checked if wrap else original
    try:
        if train:
            loss = compiled(input_ids=ids, labels=labels).loss
            loss.backward()
            again = compiled(input_ids=ids, labels=labels).loss  # a NaN that comes and goes is a race
        else:
            with torch.no_grad():
                loss = compiled(input_ids=ids, labels=labels).loss
                again = compiled(input_ids=ids, labels=labels).loss
    finally:
        eg.epilogue_gemm = original
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    bad = sum(not torch.isfinite(g).all() for g in grads)
    return f"{loss.item():.4f}, again {again.item():.4f}", bad, len(grads), nfi.reports()


torch._dynamo.reset()
model = tiny_model("bert", **KW).train()
model.load_state_dict(state)
model.to("cuda", torch.bfloat16)
print("eager loss", model(input_ids=ids, labels=labels).loss.item(), flush=True)
variants = [("auto (first, as convergence.py runs it)", dict(), {}, True, False)] if "auto-first" in sys.argv else []
variants += [("always, direct", dict(policy="always"), {}, True, False),
            ("always, op, every GEMM checked", dict(policy="always", launch="op"), {}, True, True),
            ("always, direct, one-segment statistics", dict(policy="always"),
             dict(epilogue_stats_two_segments=False), True, False),
            ("always, direct, inference", dict(policy="always"), {}, False, False)]
for name, options, tune, train, wrap in variants:
    with tuning.override(**tune):
        try:
            loss, bad, n, reports = step(options, train, wrap)
            print(f"{name}: loss {loss}, nonfinite grads {bad} of {n}", flush=True)
            if name == "always, direct":
                for s in reports:
                    print("  site", s.node, s.implementation, s.rewritten, s.reason[:300])
        except Exception as e:
            print(f"{name}: {type(e).__name__}: {str(e)[:500]}", flush=True)

print("configs tuned in this process:", eg.tuned_configs(), sep="\n", flush=True)
print("every config of each GEMM seen:", flush=True)
for (epilogue, ashape, wshape, dtype, w_kn), t in (SEEN if "noconfigs" not in sys.argv else {}).items():
    ref = regrouped.reference(t["a"], t["w"], t["bias"], t["residual"], t["scale"], t["shift"], t["u"], epilogue,
                              w_kn, t["residual_norm"], t["head_norm"])
    rows = collections.Counter()
    for cfg in eg._configs(t["a"], epilogue):
        try:
            outs = original(t["a"], t["w"], epilogue=epilogue, w_kn=w_kn, config=cfg,
                            **{k: t[k] for k in ("residual", "bias", "scale", "shift", "u", "residual_norm",
                                                 "head_norm")})
            torch.cuda.synchronize()
            errs = [rel(x, r) for x, r in zip(outs, ref) if x.numel() and r.numel()]
            worst = max(errs) if all(e == e for e in errs) else float("nan")
            if not worst < 2e-2:
                print(f"  BAD {ashape}x{wshape} {epilogue} {cfg}: {['%.1e' % e for e in errs]}", flush=True)
            rows["bad" if not worst < 2e-2 else "ok"] += 1
        except Exception as e:
            rows[f"failed ({type(e).__name__})"] += 1
    print(f"  {ashape}x{wshape} stats={epilogue.stats} row_norm={epilogue.row_norm} act={epilogue.activation} "
          f"residual_norm={epilogue.residual_norm}: {dict(rows)}", flush=True)

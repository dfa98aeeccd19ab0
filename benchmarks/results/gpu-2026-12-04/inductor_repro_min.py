"""The Inductor bug of gpu-2026-12-03i (wrong output and gradients with plain torch.compile, no plugin) reduced to
tensors: per-head RMSNorm (QK-norm), RoPE, causal SDPA over one head of width D, bf16. Prints compiled vs float64
against eager vs float64 for each variant; a line ends in WRONG where compiled is > 5x eager's error.
    python inductor_repro_min.py        (GPU)"""
import torch
import torch.nn.functional as F


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def rope(t, cos, sin):
    half = t.shape[-1] // 2
    return t * cos + torch.cat((-t[..., half:], t[..., :half]), -1) * sin


def f(q, k, v, wq, wk, cos, sin, qk_norm, use_rope, causal, inv=None):
    if inv is not None:  # RoPE's table computed inside the graph, as the models do
        ang = torch.arange(q.shape[-2], device=q.device).float()[:, None] * inv[None]
        ang = torch.cat((ang, ang), -1)
        cos, sin = ang.cos().to(q.dtype), ang.sin().to(q.dtype)
    if qk_norm:
        q, k = F.rms_norm(q, q.shape[-1:], wq, 1e-6), F.rms_norm(k, k.shape[-1:], wk, 1e-6)
    if use_rope:
        q, k = rope(q, cos, sin), rope(k, cos, sin)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def check(L, D, qk_norm, use_rope, causal, train, three_d=False, table_in_graph=False, dtype=torch.bfloat16):
    torch.manual_seed(0)
    q, k, v = (torch.randn(*((1,) if three_d else (1, 1)), L, D, device="cuda") for _ in range(3))
    wq, wk = (1 + 0.1 * torch.randn(D, device="cuda") for _ in range(2))
    inv = 1.0 / 10000 ** (torch.arange(0, D, 2, device="cuda").float() / D)
    ang = torch.arange(L, device="cuda").float()[:, None] * inv[None]
    ang = torch.cat((ang, ang), -1)
    cos, sin = ang.cos(), ang.sin()
    leaves = [q, k, v, wq, wk]
    runs = {}
    for name, fn, dt in (("compiled", torch.compile(f, fullgraph=True), dtype), ("eager", f, dtype),
                         ("fp64", f, torch.float64)):
        args = [t.to(dt).requires_grad_(train) for t in leaves]
        out = fn(*args, cos.to(dt), sin.to(dt), qk_norm, use_rope, causal, inv if table_in_graph else None)
        grads = []
        if train:
            g = torch.Generator(device="cuda").manual_seed(1)
            out.backward(torch.randn(out.shape, device="cuda", generator=g).to(dt))
            grads = [a.grad if a.grad is not None else torch.zeros_like(a) for a in args]
        runs[name] = (out, grads)
    err = lambda n, i: 0.0 if i is not None and runs["fp64"][1][i].norm() == 0 else rel(runs[n][0] if i is None else runs[n][1][i], runs["fp64"][0] if i is None else runs["fp64"][1][i])  # noqa: E731
    worst = max([None] + (list(range(5)) if train else []), key=lambda i: err("compiled", i) / max(err("eager", i), 1e-12))
    c, e = err("compiled", worst), err("eager", worst)
    what = "output" if worst is None else "d" + "q k v wq wk".split()[worst]
    print(f"L={L} D={D} qk_norm={qk_norm} rope={use_rope} causal={causal} train={train} 3-D={three_d} "
          f"table in graph={table_in_graph}: worst {what} "
          f"compiled {c:.2e} eager {e:.2e}{'  WRONG' if c > 5 * e else ''}", flush=True)
    torch._dynamo.reset()


if __name__ == "__main__":
    # the block (../gpu-2026-12-03i/inductor_repro.py) is wrong at L=2853, D=1024 with QK-norm and RoPE, trained;
    # these tensors alone were right with 4-D inputs and the table passed in: the 3-D SDPA and the table computed
    # in the graph, as the block has them
    cases = [(2853, 1024, True, True, True, True, three_d, in_graph) for three_d in (False, True)
             for in_graph in (False, True)]
    cases += [(2853, 1024, False, True, True, True, True, True), (2048, 1024, True, True, True, True, True, True),
              (2853, 1024, True, True, True, False, True, True), (2853, 128, True, True, True, True, True, True)]
    for case in cases:
        try:
            check(*case)
        except Exception as e:  # noqa: BLE001
            print(f"{case}: {type(e).__name__}: {str(e)[:200]}", flush=True)

"""Compile a small Llama-style decoder block with the norm_fusion backend, check it against eager, and print which
normalization sites were fused (on a GPU also the speed against torch.compile default).

    python examples/quickstart.py            # CPU or GPU
    NORM_FUSION_LOG=1 python examples/quickstart.py   # the plugin's log lines as well
"""

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

import norm_fusion_inductor


class LlamaRMSNorm(nn.Module):  # written as transformers writes it
    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class DecoderBlock(nn.Module):
    def __init__(self, hidden=256, heads=4, ffn=512):
        super().__init__()
        self.heads = heads
        self.input_norm = LlamaRMSNorm(hidden)
        self.q, self.k, self.v = (nn.Linear(hidden, hidden, bias=False) for _ in range(3))
        self.o = nn.Linear(hidden, hidden, bias=False)
        self.post_attention_norm = LlamaRMSNorm(hidden)
        self.gate, self.up = nn.Linear(hidden, ffn, bias=False), nn.Linear(hidden, ffn, bias=False)
        self.down = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x):
        b, s, d = x.shape
        h = self.input_norm(x)
        q, k, v = (p(h).view(b, s, self.heads, -1).transpose(1, 2) for p in (self.q, self.k, self.v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, d))
        h = self.post_attention_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def main():
    cuda = torch.cuda.is_available()
    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    torch.manual_seed(0)
    hidden = 1024 if cuda else 256
    block = DecoderBlock(hidden, heads=8, ffn=4 * hidden).to(device, dtype)
    for p in block.parameters():  # non-trivial norm weights
        if p.dim() == 1:
            p.data.uniform_(0.5, 1.5)
    x = torch.randn(8 if cuda else 2, 512 if cuda else 16, hidden, device=device, dtype=dtype)

    # "always" on CPU, where no fused kernel can win a measurement; "auto" (the default) chooses by measurement
    policy = "auto" if cuda else "always"
    compiled = torch.compile(block, backend="norm_fusion", options={"norm_fusion": {"policy": policy}})
    norm_fusion_inductor.clear_reports()
    with torch.no_grad():
        out = compiled(x)
        ref = block(x)
        ref64 = copy.deepcopy(block).double()(x.double())
    err = ((out.double() - ref64).norm() / ref64.norm()).item()
    err_eager = ((ref.double() - ref64).norm() / ref64.norm()).item()
    print(f"device={device} dtype={dtype}: rel. error vs float64 {err:.2e} (eager {err_eager:.2e})")
    for site in norm_fusion_inductor.reports():
        print("  " + site.line())
    assert err < (2e-2 if dtype == torch.bfloat16 else 1e-4), err

    if cuda:
        from triton.testing import do_bench

        default = torch.compile(block)
        with torch.no_grad():
            default(x)
            times = {"default": [], "plugin": []}
            for _ in range(3):  # interleaved
                times["default"].append(do_bench(lambda: default(x), return_mode="median"))
                times["plugin"].append(do_bench(lambda: compiled(x), return_mode="median"))
        t_default, t_plugin = (sorted(v)[1] for v in times.values())
        print(f"inference: torch.compile default {t_default:.3f} ms, norm_fusion {t_plugin:.3f} ms "
              f"({t_default / t_plugin:.2f}x)")


if __name__ == "__main__":
    main()

import torch, torch.nn.functional as F, triton
from torch.nn.attention import sdpa_kernel, SDPBackend
B,L,HQ,HK,D=4,4096,32,8,128
q=torch.randn(B,HQ,L,D,device="cuda",dtype=torch.bfloat16); k=torch.randn(B,HK,L,D,device="cuda",dtype=torch.bfloat16); v=torch.randn_like(k)
for name, be in [("default", None), ("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION)]:
    def f():
        if be is None: return F.scaled_dot_product_attention(q,k,v,is_causal=True,enable_gqa=True)
        with sdpa_kernel(be): return F.scaled_dot_product_attention(q,k,v,is_causal=True,enable_gqa=True)
    try: print(name, round(triton.testing.do_bench(f, rep=50, return_mode="median"),3), "ms", flush=True)
    except Exception as e: print(name, "error", str(e)[:120])

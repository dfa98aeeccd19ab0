import os

import torch

# Without a GPU the Triton kernels run in the interpreter; Triton reads this when a kernel is defined, so it must
# be set before norm_fusion_inductor is imported.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Every test compiles for real: a warm FX-graph or AOTAutograd cache would skip the pass (and its site records).
# test_config.py turns the caches back on where it tests them.
torch._inductor.config.force_disable_caches = True

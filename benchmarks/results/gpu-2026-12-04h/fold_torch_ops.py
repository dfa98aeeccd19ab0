"""blocks.py with the consumers' weight fold in torch ops, as before kernels.weight_fold (u an opaque op):
the control of the fold kernel's A/B. Run from benchmarks/ with blocks.py's arguments."""
import os
import runpy
import sys

from norm_fusion_inductor import regrouped

regrouped.fold_operands = regrouped.fold_with_torch_ops
sys.argv = ["blocks.py", *sys.argv[1:]]
sys.path.insert(0, os.getcwd())  # blocks.py imports its neighbours
runpy.run_path("blocks.py", run_name="__main__")

"""The package imports the same way from an install, an editable install and a source checkout: patterns/ sits at
the top of the repository (the design card's layout) and is found as ``norm_fusion_inductor.patterns``."""

import pathlib
import site
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_patterns_import_from_a_source_checkout():
    """Without site's .pth files (so without an editable install's finder), only the checkout on sys.path."""
    paths = [str(ROOT), *site.getsitepackages()]
    code = ("import sys; sys.path[:0] = %r; import norm_fusion_inductor.patterns.regrouped_norm as m; "
            "print(m.__file__)" % paths)
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert pathlib.Path(out.stdout.strip()) == ROOT / "patterns" / "regrouped_norm.py"

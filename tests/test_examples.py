"""The README's main command runs on this machine and checks itself against eager and float64."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_quickstart_runs():
    env = dict(os.environ, TORCHINDUCTOR_FORCE_DISABLE_CACHES="1")
    result = subprocess.run([sys.executable, str(ROOT / "examples" / "quickstart.py")], capture_output=True,
                            text=True, env=env, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "rel. error vs float64" in result.stdout
    assert result.stdout.count("REWRITTEN") == 2 or "cuda" in result.stdout, result.stdout

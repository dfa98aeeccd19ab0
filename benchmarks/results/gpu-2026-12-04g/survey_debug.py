"""pytest plugin for one GPU call (-p survey_debug): what _measure_epilogue returns and what the Triton tuner
holds, per call, to find why a survey-on run leaves triton_config None."""
import sys

from norm_fusion_inductor import selection
from norm_fusion_inductor.kernels import epilogue_gemm as eg

_real = selection._measure_epilogue


def _logged(site, screen=selection.Screen(), cache_root=None):
    out = _real(site, screen, cache_root)
    key = (eg.m_bucket(site.M), site.N, site.K, site.dtype, site.w_kn, selection._site_epilogue(site))
    print(f"\n[measure] survey={selection._SURVEY is not None} site={site} -> config={out.get('triton_config')} "
          f"keys={sorted(out)}\n  lookup={key}\n  tuned={[k[:6] for k in eg._TUNED]}", file=sys.stderr)
    return out


selection._measure_epilogue = _logged

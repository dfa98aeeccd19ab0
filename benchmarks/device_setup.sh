# Source on the GPU machine (no network, no pip install): lays the package out as installed under /tmp/site.
rm -rf /tmp/site && mkdir -p /tmp/site
cp -r norm_fusion_inductor /tmp/site/ && cp -r patterns /tmp/site/norm_fusion_inductor/patterns
cp -r tests examples benchmarks /tmp/site/
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1

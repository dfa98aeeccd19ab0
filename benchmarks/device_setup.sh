# Source on the GPU machine (no network, no pip install): the checkout itself, at /tmp/site for the scripts that
# cd there; the package finds patterns/ at the top of the checkout (norm_fusion_inductor/__init__.py).
rm -rf /tmp/site && ln -s "$PWD" /tmp/site
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1

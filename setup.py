from setuptools import setup

setup(
    name="norm_fusion_inductor",
    version="0.1.0",
    description="Normalization fused into matmuls (and attention) for torch.compile / Inductor",
    python_requires=">=3.10",
    # patterns/ lives at the top of the repository, installed as norm_fusion_inductor.patterns
    packages=["norm_fusion_inductor", "norm_fusion_inductor.kernels", "norm_fusion_inductor.patterns"],
    package_dir={"norm_fusion_inductor.patterns": "patterns"},
    # the traced patterns shipped per torch version (python -m norm_fusion_inductor trace-patterns)
    package_data={"norm_fusion_inductor.patterns": ["traced/*.json"]},
    install_requires=["torch>=2.11", "triton>=3.6"],
    extras_require={
        "test": ["pytest>=8,<10", "pytest-xdist==3.8.0", "expecttest==0.3.0", "numpy<2.3", "transformers==5.24.0",
                 "scipy==1.17.1"],
        # `python -m norm_fusion_inductor calibrate` fits the cost model's constants with scipy
        "calibrate": ["scipy>=1.10"],
        # the Quack backend of the regrouped GEMMs (Hopper, Blackwell; Python 3.12 wheels). The pair tested on the
        # H200: cutlass-dsl 4.8.1 breaks Quack 0.6.5's epilogue fingerprinting ("no fail-closed semantic key")
        "cute": ["quack-kernels==0.6.5", "nvidia-cutlass-dsl==4.7.1"],
    },
    entry_points={"torch_dynamo_backends": ["norm_fusion = norm_fusion_inductor.backend:norm_fusion_backend"]},
)

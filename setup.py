"""The one packaging rule that pyproject.toml cannot state beside automatic package discovery: the top-level data/
folder (the shipped tiny models and preference pairs) installs as `minirlhf/shipped/`, so that a wheel, an sdist or a
`pip install git+URL` carries it. Everything else about the package is in pyproject.toml."""

from pathlib import Path

from setuptools import find_namespace_packages, setup

# data/'s folders whose names could be imported (sentiment_pairs) are packages to setuptools: declared as such, with
# their files as package data, so that it does not warn that they "would be ignored"
SHIPPED_PACKAGES = [f"minirlhf.shipped.{d.name}" for d in sorted(Path(__file__).parent.joinpath("data").iterdir())
                    if d.is_dir() and d.name.isidentifier()]

setup(
    # namespace discovery: minirlhf/trainers/ has no __init__.py
    packages=[
        *find_namespace_packages(include=["minirlhf", "minirlhf.*"], exclude=["*.__pycache__"]),
        "minirlhf.shipped",
        *SHIPPED_PACKAGES,
    ],
    package_dir={"minirlhf.shipped": "data"},
    package_data={"minirlhf.shipped": ["*/*"], "minirlhf.course": ["questions.json"],
                  **{package: ["*"] for package in SHIPPED_PACKAGES}},
)

"""The one packaging rule that pyproject.toml cannot state beside automatic package discovery: the top-level data/
folder (the shipped tiny models and preference pairs) installs as `minirlhf/shipped/`, so that a wheel, an sdist or a
`pip install git+URL` carries it. Everything else about the package is in pyproject.toml.

An editable install (`pip install -e .`, what `make` does) runs from this checkout, where `models.DATA_DIR` reads
data/ in place: it gets the plain layout (the checkout on sys.path through a .pth file), for which setuptools needs
no import hook and prints no notice about one."""

import sys
from pathlib import Path

from setuptools import find_namespace_packages, setup

# namespace discovery: minirlhf/trainers/ has no __init__.py
PACKAGES = find_namespace_packages(include=["minirlhf", "minirlhf.*"], exclude=["*.__pycache__"])
# data/'s folders whose names could be imported (sentiment_pairs) are packages to setuptools: declared as such, with
# their files as package data, so that it does not warn that they "would be ignored"
SHIPPED_PACKAGES = [f"minirlhf.shipped.{d.name}" for d in sorted(Path(__file__).parent.joinpath("data").iterdir())
                    if d.is_dir() and d.name.isidentifier()]

if "editable_wheel" in sys.argv:  # the command setuptools runs for `pip install -e .`
    setup(packages=PACKAGES, package_dir={"": "."})
else:
    setup(
        packages=[*PACKAGES, "minirlhf.shipped", *SHIPPED_PACKAGES],
        package_dir={"minirlhf.shipped": "data"},
        package_data={"minirlhf.shipped": ["*/*"], "minirlhf.course": ["questions.json"],
                      **{package: ["*"] for package in SHIPPED_PACKAGES}},
    )

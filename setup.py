"""The one packaging rule that pyproject.toml cannot state beside automatic package discovery: the top-level data/
folder (the shipped tiny models and preference pairs) installs as `minirlhf/shipped/`, so that a wheel, an sdist or a
`pip install git+URL` carries it. Everything else about the package is in pyproject.toml."""

from setuptools import find_namespace_packages, setup

setup(
    # namespace discovery: minirlhf/trainers/ has no __init__.py
    packages=[
        *find_namespace_packages(include=["minirlhf", "minirlhf.*"], exclude=["*.__pycache__"]),
        "minirlhf.shipped",
    ],
    package_dir={"minirlhf.shipped": "data"},
    package_data={"minirlhf.shipped": ["*/*"], "minirlhf.course": ["questions.json"]},
)

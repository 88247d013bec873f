"""Fetch the book's JavaScript from the npm registry into book/_static/vendor/, so the rendered course reads offline.

The pages of `make book` typeset their equations with MathJax and draw the sliders with the ipywidgets HTML manager.
Both are committed under book/_static/vendor/ (book/conf.py points Sphinx and myst-nb at them), so a page opened
without a network loads nothing from a CDN. This script is how they got there and how to update them:

    python scripts/vendor_book_assets.py           # npm pack each pinned package, check its hash, copy the files in
    python scripts/vendor_book_assets.py --check   # the same, but only compare with the committed files

To update a package, change its version below and run the script: it stops with the tarball's sha512, which you check
against `npm view <package>@<version> dist.integrity` and paste into PACKAGES. The HTML manager's version follows
ipywidgets (the same release of the ipywidgets repository); MathJax stays at 3 (its fonts are files next to it).
Needs `npm` (Node.js); nothing else is installed.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENDOR = ROOT / "book" / "_static" / "vendor"


@dataclass(frozen=True)
class Package:
    spec: str  # name@version, as `npm pack` takes it
    integrity: str  # the tarball's sha512, in npm's `dist.integrity` spelling
    files: dict[str, str]  # path in the tarball (under package/) -> path under book/_static/vendor/; a trailing
    # "/*" copies every file of that folder


# MathJax 3, TeX input with every extension (so nothing is loaded on demand), CommonHTML output: it looks for its
# fonts in output/chtml/fonts/woff-v2/ next to the script. The HTML manager's standalone bundle (no RequireJS): it
# holds the core widgets (base, controls, output) and Font Awesome's CSS, whose fonts it looks for next to itself
# (only the woff2 files: Chromium, Firefox and Safari pick those first). Font Awesome's package gives its licence.
PACKAGES = [
    Package("mathjax@3.2.2",
            "sha512-Bt+SSVU8eBG27zChVewOicYs7Xsdt40qm4+UpHyX7k0/O9NliPc+x77k1/FEsPsjKPZGJvtRZM1vO+geW0OhGw==",
            {"es5/tex-chtml-full.js": "mathjax/tex-chtml-full.js",
             "es5/output/chtml/fonts/woff-v2/*": "mathjax/output/chtml/fonts/woff-v2",
             "LICENSE": "mathjax/LICENSE"}),
    Package("@jupyter-widgets/html-manager@1.0.15",
            "sha512-5thBIV6ymNgmPVOHvzx+gGy8ZSKmSazhtGw4/c4xJDVzRhG9PTeQsRjF3FUTopvFi//SABeNz1yp47bCrJ3CQA==",
            {"dist/embed.js": "html-manager/embed.js",
             "dist/embed.js.LICENSE.txt": "html-manager/embed.js.LICENSE.txt",
             "dist/1551f4f60c37af51121f.woff2": "html-manager/1551f4f60c37af51121f.woff2",
             "dist/7a3337626410ca2f4071.woff2": "html-manager/7a3337626410ca2f4071.woff2",
             "dist/d878b0a6a1144760244f.woff2": "html-manager/d878b0a6a1144760244f.woff2"}),
    Package("@fortawesome/fontawesome-free@5.15.4",
            "sha512-eYm8vijH/hpzr/6/1CJ/V/Eb1xQFW2nnUKArb3z+yUWv7HTwj6M7SP957oMjfZjAHU6qpoNc2wQvIxBLWYa/Jg==",
            {"LICENSE.txt": "html-manager/fontawesome-LICENSE.txt"}),
]


def npm_pack(spec: str, into: Path) -> Path:
    """The package's tarball, downloaded by `npm pack` into `into`."""
    if shutil.which("npm") is None:
        sys.exit("npm is not installed: install Node.js (Debian: apt-get install npm)")
    packed = subprocess.run(["npm", "pack", spec, "--pack-destination", str(into), "--silent"],
                            capture_output=True, text=True)
    if packed.returncode != 0:
        sys.exit(f"npm pack {spec} failed:\n{packed.stderr}")
    return into / packed.stdout.strip().splitlines()[-1]


def sha512_integrity(path: Path) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(path.read_bytes()).digest()).decode()


def wanted_files(package: Package, unpacked: Path) -> dict[Path, Path]:
    """Source file in the unpacked tarball -> its place under VENDOR."""
    pairs = {}
    for source, target in package.files.items():
        if source.endswith("/*"):
            folder = unpacked / source[:-2]
            pairs.update({path: VENDOR / target / path.name for path in sorted(folder.iterdir()) if path.is_file()})
        else:
            pairs[unpacked / source] = VENDOR / target
    missing = [str(source) for source in pairs if not source.is_file()]
    if missing or not pairs:
        sys.exit(f"{package.spec}: the tarball has no {missing or package.files}")
    return pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed files, write nothing")
    args = parser.parse_args()
    stale = []
    with tempfile.TemporaryDirectory() as scratch:
        for package in PACKAGES:
            folder = Path(scratch) / str(PACKAGES.index(package))
            folder.mkdir()
            tarball = npm_pack(package.spec, folder)
            integrity = sha512_integrity(tarball)
            if integrity != package.integrity:
                sys.exit(f"{package.spec}: the tarball's hash is {integrity}, the pinned one {package.integrity}")
            with tarfile.open(tarball) as archive:
                archive.extractall(folder, filter="data")
            for source, target in wanted_files(package, folder / "package").items():
                if args.check:
                    if not target.is_file() or target.read_bytes() != source.read_bytes():
                        stale.append(str(target.relative_to(ROOT)))
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(source, target)
            print(f"{package.spec}: {integrity[:20]}... ok")
    if stale:
        sys.exit("differ from the pinned packages: " + ", ".join(stale))
    print("book/_static/vendor/ matches the pinned packages" if args.check else f"written into {VENDOR}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Builds tokamax_cpp's pure-Python wheel from python/ with Debian's tools alone:

    python3 scripts/build_wheel.py OUT_DIR [--library PATH]

setuptools' PEP 517 backend (python3-setuptools, python3-wheel) is called directly, with no
frontend and no network: no pip, no build isolation. python/ is copied to a temporary
folder first, so the build leaves no build/ or egg-info in the checkout. --library copies
that libtokamax.so (with the libtokamax_runtime.so beside it) into the wheel's
tokamax_cpp/lib/; without it the wheel holds no library (TOKAMAX_CPP_LIBRARY, an installed
package's PREFIX/lib or the loader finds one). Prints the wheel's path. Exit status 77:
setuptools or wheel is missing (the reason on stderr).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent / "python"
SKIP = 77

# The backend runs in a child so that its imports and logging stay out of the caller.
BUILD = "import sys; from setuptools import build_meta; print(build_meta.build_wheel(sys.argv[1]))"


def missing_tools() -> str:
    try:
        import setuptools  # noqa: F401
    except ImportError:
        return "no setuptools module (apt install python3-setuptools)"
    for bdist_wheel in ("setuptools.command.bdist_wheel", "wheel.bdist_wheel"):  # setuptools >= 70.1 has its own
        try:
            __import__(bdist_wheel)
            return ""
        except ImportError:
            pass
    return "setuptools has no bdist_wheel command (apt install python3-wheel)"


def build(out_dir: Path, library: Path | None = None) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tokamax-wheel-") as tmp:
        tree = Path(tmp) / "python"
        shutil.copytree(SOURCE, tree, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "lib"))
        if library is not None:
            lib_dir = tree / "tokamax_cpp" / "lib"
            lib_dir.mkdir()
            for so in [library, *library.resolve().parent.glob("libtokamax_runtime.so*")]:
                shutil.copy2(so, lib_dir / so.name)  # copy2 follows links: the wheel holds files
        done = subprocess.run([sys.executable, "-c", BUILD, str(out_dir.resolve())], cwd=tree,
                              capture_output=True, text=True)
        if done.returncode != 0:
            sys.stderr.write(done.stdout + done.stderr)
            raise RuntimeError("setuptools' build_wheel failed")
    return out_dir / done.stdout.strip().splitlines()[-1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--library", type=Path, help="libtokamax.so to put in the wheel's tokamax_cpp/lib/")
    args = parser.parse_args()
    why = missing_tools()
    if why:
        print(f"build_wheel.py: cannot build the wheel: {why}", file=sys.stderr)
        return SKIP
    print(build(args.out_dir, args.library))
    return 0


if __name__ == "__main__":
    sys.exit(main())

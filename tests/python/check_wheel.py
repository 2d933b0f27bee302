#!/usr/bin/env python3
"""CTest python-wheel: builds tokamax_cpp's wheel (scripts/build_wheel.py, Debian's
setuptools + wheel) into a temporary folder and checks it:

    python3 tests/python/check_wheel.py [--library build/libtokamax.so]

- every module of python/tokamax_cpp and ffi/handler.cc, byte for byte, and no library;
- METADATA: the name and version of python/pyproject.toml, numpy required; WHEEL: pure,
  py3-none-any;
- with --library: the wheel unpacked as the relocatable package lays it out
  (PREFIX/python/tokamax_cpp beside PREFIX/lib/libtokamax.so, a link to the given
  library), imported with no TOKAMAX_CPP_LIBRARY: it must load PREFIX/lib/libtokamax.so
  and run a layer_norm on numpy (the interpreter).

Exit status 77 (CTest: Skipped) with the reason when setuptools or wheel is missing.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "python"
SKIP = 77

# Run in the unpacked package: which library was loaded, and one op on the interpreter.
LAYOUT_PROBE = """
import numpy as np, tokamax_cpp
from tokamax_cpp import _capi
x = np.arange(12, dtype=np.float32).reshape(3, 4)
y = tokamax_cpp.layer_norm(x, None, None)
assert abs(float(y.mean())) < 1e-5, y
print(_capi.library_path)
"""


def project_field(name: str) -> str:
    text = (SOURCE / "pyproject.toml").read_text()
    project = text.split("[project]", 1)[1].split("\n[", 1)[0]
    return re.search(rf'^{name}\s*=\s*"([^"]+)"', project, re.M).group(1)


def build(out_dir: Path) -> Path:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_wheel.py"), str(out_dir)],
                          capture_output=True, text=True)
    if done.returncode == SKIP:
        print(f"SKIPPED: {done.stderr.strip()}")
        sys.exit(SKIP)
    if done.returncode != 0:
        sys.exit(f"build_wheel.py failed:\n{done.stdout}{done.stderr}")
    return Path(done.stdout.strip().splitlines()[-1])


def fields(text: str) -> dict[str, list[str]]:
    """An RFC 822 header block (METADATA, WHEEL) as name -> values."""
    out: dict[str, list[str]] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(": ")
        out.setdefault(key, []).append(value)
    return out


def check_contents(wheel: Path) -> None:
    name, version = project_field("name"), project_field("version")
    dist = f"{name.replace('-', '_')}-{version}"
    assert wheel.name == f"{dist}-py3-none-any.whl", f"wheel named {wheel.name}"
    expected = {f"tokamax_cpp/{p.relative_to(SOURCE / 'tokamax_cpp').as_posix()}": p
                for p in sorted((SOURCE / "tokamax_cpp").rglob("*")) if p.suffix in (".py", ".cc")}
    assert "tokamax_cpp/ffi/handler.cc" in expected
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        missing = sorted(set(expected) - names)
        assert not missing, f"missing from the wheel: {missing}"
        for member, path in expected.items():
            assert z.read(member) == path.read_bytes(), f"{member} differs from {path}"
        libraries = sorted(n for n in names if ".so" in Path(n).name)
        assert not libraries, f"a pure wheel holds libraries: {libraries}"
        metadata = fields(z.read(f"{dist}.dist-info/METADATA").decode())
        wheel_info = fields(z.read(f"{dist}.dist-info/WHEEL").decode())
    assert metadata["Name"] == [name], metadata.get("Name")
    assert metadata["Version"] == [version], metadata.get("Version")
    assert any(r.split(";")[0].strip() == "numpy" for r in metadata.get("Requires-Dist", [])), \
        metadata.get("Requires-Dist")
    assert wheel_info["Root-Is-Purelib"] == ["true"], wheel_info
    assert wheel_info["Tag"] == ["py3-none-any"], wheel_info
    print(f"ok: {wheel.name}: {len(expected)} package files byte for byte, {name} {version}, pure")


def check_layout(wheel: Path, library: Path, tmp: Path) -> None:
    try:
        import numpy  # noqa: F401
    except ImportError:
        print("layout check skipped: no numpy (apt install python3-numpy)")
        return
    prefix = tmp / "tokamax"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(prefix / "python")
    (prefix / "lib").mkdir()
    (prefix / "lib" / "libtokamax.so").symlink_to(library.resolve())
    env = {k: v for k, v in os.environ.items() if k not in ("TOKAMAX_CPP_LIBRARY", "PYTHONPATH")}
    env.update(PYTHONPATH=str(prefix / "python"), PYTHONDONTWRITEBYTECODE="1", TOKAMAX_CACHE_DISABLE="1")
    done = subprocess.run([sys.executable, "-c", LAYOUT_PROBE], cwd=tmp, env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"importing the unpacked package failed:\n{done.stdout}{done.stderr}"
    loaded = done.stdout.strip().splitlines()[-1]
    assert loaded == str(prefix / "lib" / "libtokamax.so"), f"loaded {loaded}, not the package's PREFIX/lib"
    print(f"ok: PREFIX/python/tokamax_cpp loads PREFIX/lib/libtokamax.so and runs layer_norm")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", type=Path, help="a built libtokamax.so for the package layout check")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tokamax-wheel-check-") as tmp:
        wheel = build(Path(tmp) / "dist")
        check_contents(wheel)
        if args.library:
            check_layout(wheel, args.library, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())

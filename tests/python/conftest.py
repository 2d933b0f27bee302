"""pytest setup: the package from python/ of this checkout, the library from
$TOKAMAX_CPP_LIBRARY (CTest sets it to the built libtokamax.so) or build/ beside the source."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # references.py

# The interpreter needs no disk cache; keep the tests' kernels out of the user's.
os.environ.setdefault("TOKAMAX_CACHE_DISABLE", "1")

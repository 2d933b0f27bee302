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


class _Hidden:
    """$TOKAMAX_TEST_HIDE=torch,jax: those modules fail to import, as where they are not
    installed (CTest python-tests-without-torch checks that the torch tests then skip)."""

    def __init__(self, names):
        self.names = names

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.names:
            raise ImportError(f"{name} is hidden by TOKAMAX_TEST_HIDE", name=name)
        return None


_hidden = {n.strip() for n in os.environ.get("TOKAMAX_TEST_HIDE", "").split(",") if n.strip()}
if _hidden:
    assert not _hidden & set(sys.modules), f"already imported: {sorted(_hidden & set(sys.modules))}"
    sys.meta_path.insert(0, _Hidden(_hidden))

"""README.md's JAX block and tests/python/seed_program.py (which runs it on a GPU) stay
the same program: every statement of the block is in the script, in order, except the
shape line (the script's --shape); and the block compiles."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def readme_jax_block() -> str:
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    jax_blocks = [b for b in blocks if "import tokamax_cpp as tokamax" in b and "import jax" in b]
    assert len(jax_blocks) == 1, f"{len(jax_blocks)} JAX blocks in README.md"
    return jax_blocks[0]


def statements(text: str) -> list[str]:
    """Non-blank, non-comment lines, stripped, trailing comments dropped."""
    out = []
    for line in text.splitlines():
        line = re.sub(r"\s+#.*$", "", line).strip()
        if line and not line.startswith("#"):
            out.append(line)
    return out


def test_the_block_compiles():
    compile(readme_jax_block(), "README.md", "exec")


def test_seed_program_runs_the_block():
    script = statements((ROOT / "tests" / "python" / "seed_program.py").read_text())
    at = 0
    for line in statements(readme_jax_block()):
        if line.startswith("channels, seq_len, batch_size, num_heads ="):
            continue  # the script takes the shape from --shape
        assert line in script[at:], f"README's line {line!r} is not in seed_program.py (after its line {at})"
        at = script.index(line, at) + 1

"""The diversify guide's examples run as written and print what the guide says."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "guides" / "diversify.md"


def section() -> str:
    return GUIDE.read_text(encoding="utf-8")


def test_guide_examples_run_and_print_what_they_say():
    blocks = re.findall(r"```python\n(.*?)```", section(), re.S)
    examples = [b for b in blocks if "print(" in b]
    assert len(examples) == 2, "a LangChain and a LlamaIndex example"
    assert "langchain_core" in examples[0] and "llama_index" in examples[1]
    namespace: dict = {}
    for code in examples:  # one namespace: the second example reuses the first one's text
        expected = [line[2:] for line in code.splitlines() if line.startswith("# ")]
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, str(GUIDE), "exec"), namespace)
        assert out.getvalue().splitlines() == expected

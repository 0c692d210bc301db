"""The error-code registry: the docs list it exactly, and the code spells no code by hand."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

from ipc.error_codes import AREAS, ErrorCode, markdown

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("ipc", "goondan", "agentproc", "orchestrator", "base_tools", "bench")
REGISTRY = ROOT / "ipc" / "error_codes.py"
UNPREFIXED = sorted(c.value for c in ErrorCode if not c.value.startswith("E_"))
# A string literal that is an error code: "E_..." or one of upstream's un-prefixed names.
CODE_LITERAL = re.compile(r"""["'](E_[A-Z0-9_]+|""" + "|".join(UNPREFIXED) + r""")["']""")


def _sources() -> list[Path]:
    return [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py")) if p != REGISTRY]


def test_docs_errors_page_is_generated_from_the_registry():
    page = (ROOT / "docs" / "errors.md").read_text()
    assert page == markdown(), "regenerate it: python -m ipc.error_codes > docs/errors.md"
    for code in ErrorCode:
        assert f"| `{code.value}` | {code.meaning} |" in page


def test_every_code_has_a_meaning_and_a_known_area():
    for code in ErrorCode:
        assert code.name == code.value  # so grepping a code finds its uses
        assert code.area in AREAS, code
        assert code.meaning.endswith(".") and "\n" not in code.meaning, code


def test_the_packages_spell_no_error_code_as_a_string_literal():
    found = []
    for path in _sources():
        source = path.read_text()
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type != tokenize.STRING:
                continue
            for match in CODE_LITERAL.finditer(token.string):
                where = f"{path.relative_to(ROOT)}:{token.start[0]}"
                found.append(f"{where}: {match.group(0)} (use ErrorCode.{match.group(1)})")
    assert not found, "\n".join(found)


def test_every_registered_code_is_used():
    text = "\n".join(p.read_text() for p in _sources())
    unused = [c.value for c in ErrorCode if f"ErrorCode.{c.name}" not in text]
    assert not unused, f"codes nothing raises any more: {unused}"


def test_the_scan_catches_a_literal():
    assert CODE_LITERAL.search('raise ToolError("x", code="E_SOMETHING_NEW")')
    assert CODE_LITERAL.search("code = 'AGENT_REQUEST_TIMEOUT'")
    assert not CODE_LITERAL.search('os.environ["SLACK_BOT_TOKEN"]')

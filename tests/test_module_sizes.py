"""The architecture rule on module size: no module in `app/` is over 500 lines, except the shell
grammar (`app/shell_syntax.py`), whose one idea is long. A module that grows past it is split by
idea (as `app/confinement/`, `app/executions/`, `app/process/` and `app/schemas/` were)."""

from __future__ import annotations

from pathlib import Path

APP = Path(__file__).resolve().parent.parent / "app"
MAX_LINES = 500
EXEMPT = {"app/shell_syntax.py"}


def _line_counts() -> dict[str, int]:
    modules = sorted(APP.rglob("*.py"))
    assert modules, f"no Python modules found under {APP}"
    return {
        str(path.relative_to(APP.parent)): len(path.read_text(encoding="utf-8").splitlines())
        for path in modules
    }


def test_no_app_module_is_over_500_lines_except_the_shell_grammar() -> None:
    too_long = {
        name: count
        for name, count in _line_counts().items()
        if count > MAX_LINES and name not in EXEMPT
    }
    assert not too_long, f"modules over {MAX_LINES} lines (split them by idea): {too_long}"

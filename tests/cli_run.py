"""The real entry point (cli.main) run in-process for tests: exit code, stdout and stderr."""

from __future__ import annotations

import pytest


def gpu_advisor(capsys, *args) -> tuple[int, str, str]:
    """`gpu-advisor ARGS` through cli.main, as the console script runs it."""
    from cli import main

    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    return exit_.value.code, out, err


def one_line_error(code: int, err: str, expected_code: int = 2) -> str:
    """The one error line of a refused input: the right exit code, no traceback, no class name, no escapes."""
    lines = err.strip().splitlines()
    assert code == expected_code, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Error:" not in lines[0] and "Traceback" not in err  # no exception class names
    assert "\x1b" not in err
    return lines[0]

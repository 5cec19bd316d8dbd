"""The real entry point (cli.main) run in-process for tests: exit code, stdout and stderr."""

from __future__ import annotations

from pathlib import Path

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


def saved_plan(folder: Path, *args: str) -> Path:
    """`gpu-advisor plan ARGS --format json` as a fresh process with its own empty cache, saved to
    folder/plan.json as users save it (the planner's own output, nothing in-process)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "GPU_ADVISOR_CACHE_DIR": str(folder / "cache")}
    done = subprocess.run([sys.executable, "-m", "advisor", "plan", *args, "--format", "json"], capture_output=True,
                          text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    path = folder / "plan.json"
    path.write_text(done.stdout, encoding="utf-8")
    return path

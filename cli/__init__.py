"""The `gpu-advisor` command: a thin click group on top of `advisor`, `pricing` and `reports`.

This package is the composition root: it imports the library packages, none of them imports
it (tests/test_layers.py). Subcommands live one per module (`cli/estimate.py`, ...) and are
imported only when used, so `gpu-advisor estimate` never pays for pandas, matplotlib or the
price sheets, and `gpu-advisor --help` imports none of them (it lists COMMANDS). Errors carrying
an `exit_code` become one line on stderr (no traceback unless --debug); `cli/output.py` is the one
place results become tables, CSV and Markdown.
"""

from __future__ import annotations

import errno
import gc
import importlib
import re
import sys
import warnings

import click

from advisor.errors import validation_message
from advisor.text import plain
from pricing.http import redact

# name -> ("module:attribute" of the click command, the first sentence of its help, which `gpu-advisor --help`
# shortens as click does). Written here so that listing the commands imports none of them (tests/cli/test_entry.py
# checks that `--help` shows each command's own short help and loads no command module).
COMMANDS: dict[str, tuple[str, str]] = {
    "estimate": ("cli.estimate:estimate",
                 "Per-GPU memory for fine-tuning MODEL (catalog name, HF id, config.json path) or --params N."),
    "plan": ("cli.plan:plan", "Rank cloud instances × technique stacks by the cost (or time) of the whole fine-tuning "
                              "run."),
    "prices": ("cli.prices:prices", "Price sheets: bundled snapshot, your own sheets, the fetch cache."),
    "report": ("cli.report:report",
               "Render a saved plan (from `gpu-advisor plan --format json`) as an HTML or Markdown report."),
    "launch": ("cli.launch:launch", "Write accelerate_config.yaml, training_args.yaml, train.py, launch.sh, sky.yaml "
                                    "and a README for candidate --rank of a saved plan (--from) or of a plan made now "
                                    "from the plan options."),
    "models": ("cli.models:models",
               "List the built-in models: Hugging Face id, short aliases, family and parameter count."),
    "tokens": ("cli.tokens:tokens", "Count DATA (JSONL/JSON, CSV, Parquet or a datasets folder) in the model's "
                                    "tokens: totals, truncation at --seq-len, length percentiles, packed vs padded "
                                    "compute and a suggested seq_len."),
    "calibrate": ("cli.calibrate:calibrate", "Compare a measured run (measured.json from `launch.sh --benchmark`) "
                                             "with the estimate for the same model, GPU, stack and shape, and store "
                                             "it so `gpu-advisor plan` uses it for matching candidates."),
    "approve": ("cli.approve:approve", "Approve one candidate of a saved plan: its digest, caps, prices and their "
                                       "dates, who and when."),
    "track": ("cli.track:track", "Record a run's actual hours, tokens/s and cost against its approval in the "
                                 "ledger."),
    "ledger": ("cli.ledger:ledger", "Approved vs actual per run and per project: the burn-down and the p50/p90 of "
                                    "what remains."),
    "serve": ("cli.serve:serve", "A local web page: a plan form, the decision card and ranked table for any inputs, "
                                 "2-4 scenarios side by side, and the plan JSON, Markdown report and launch bundle as "
                                 "downloads."),
}


class LazyGroup(click.Group):
    """A group whose commands are imported when one is run, not when they are listed: `--help` writes the
    names and one-line helps from COMMANDS, so it costs no command module (nor pandas, the planner or the
    price loader they import)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        return self._load(name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        width = formatter.width - 6 - max(len(name) for name in COMMANDS)
        rows = [(name, _short(text, width)) for name, (_, text) in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    @staticmethod
    def _load(name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module, attr = target[0].split(":")
        return getattr(importlib.import_module(module), attr)


def _short(text: str, limit: int) -> str:
    """What click's Command.get_short_help_str(limit) makes of a help text: a command that only carries it."""
    return click.Command(None, help=text).get_short_help_str(limit)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.version_option(package_name="gpu-cost-advisor")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Will this fine-tuning run fit, on which instance, how long, and what will it cost?"""
    ctx.obj = {"debug": debug}


def main(argv: list[str] | None = None) -> None:
    """Run the CLI. Every failure is one line on stderr (no traceback unless --debug), made safe for
    the terminal (advisor.text.plain: no escape sequences or line breaks from the input it quotes):
    exit 2 for bad input (options, files, values), 1 for the environment (permissions, a full disk,
    a missing folder) and anything unexpected, 130 on Ctrl-C. Warnings are one `warning:` line each."""
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    previous = warnings.showwarning
    if not debug:
        warnings.showwarning = _show_warning
    try:
        cli.main(args=argv, prog_name="gpu-advisor", standalone_mode=False)
    except click.exceptions.Abort:
        _fail("Aborted.", 1, prefix="")
    except click.UsageError as exc:  # bad option or value: one line, no usage dump
        _fail(exc.format_message(), 2)
    except click.ClickException as exc:
        _fail(exc.format_message(), exc.exit_code)
    except KeyboardInterrupt:
        _fail("Interrupted.", 130, prefix="")
    except Exception as exc:  # noqa: BLE001 - the one place errors become exit codes
        if debug:
            raise
        code = getattr(exc, "exit_code", None)
        if isinstance(code, int):
            _fail(first_line(exc), code)
        if type(exc).__name__ == "ValidationError":  # pydantic, raised from user input
            _fail(validation_message(exc), 2)
        if isinstance(exc, OSError):
            _fail(os_message(exc), 1)
        if isinstance(exc, (RecursionError, MemoryError)):
            _fail("the input is too large or too deeply nested to process (rerun with --debug for details)", 1)
        _fail(f"internal error: {first_line(exc)} (rerun with --debug for the details, and report it)", 1)
    finally:
        warnings.showwarning = previous
    sys.exit(0)


def run() -> None:
    """The console script and `python -m advisor`: `main` as the short-lived process it is.

    CPython's cyclic garbage collector buys nothing here and costs 12-19% of a plan over the bundled
    sheet (interleaved runs, benchmarks/bench_planner.py): imports and thousands of small estimate objects
    trigger collections over and over, though almost nothing they make is cyclic garbage (the
    100,000-row plan's peak memory measured the same without it), and at exit the interpreter
    collects once more over every object. So the collector is off, and what is alive at the end is
    frozen (gc.freeze), which that last collection skips. The exit is otherwise the ordinary one.
    Tests call `main`, which leaves the collector alone."""
    gc.disable()
    try:
        main()
    finally:
        gc.freeze()


_CLASS_NAME = re.compile(r"\b[A-Z][A-Za-z]*(?:Error|Exception|Warning): ")


def _fail(message: str, code: int, prefix: str = "error: ") -> None:
    """One line: terminal-safe, with every URL's password masked (pricing.http.redact: HF_ENDPOINT's, a
    source URL's, whatever a library quoted), and without Python exception class names (a library
    message that quotes one, e.g. 'ValueError: ...', keeps only its words)."""
    click.echo(prefix + (_CLASS_NAME.sub("", redact(plain(message))) or "failed"), err=True)
    sys.exit(code)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    click.echo(f"warning: {redact(plain(message))}", err=True)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip() or "no details"
    return text.splitlines()[0]


_OS_WORDS = {
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.ENOENT: "no such file or folder",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
    errno.EISDIR: "is a folder, not a file",
    errno.EEXIST: "already exists (a file or a broken symbolic link is in the way)",
    errno.ENOSPC: "no space left on the disk",
    errno.EROFS: "the file system is read-only",
    errno.ENAMETOOLONG: "the name is too long",
    errno.ELOOP: "too many levels of symbolic links",
}


def os_message(exc: OSError) -> str:
    """An environment failure in words: what could not be done, where, and why."""
    where = f"{exc.filename}: " if exc.filename else ""
    why = _OS_WORDS.get(exc.errno) or (exc.strerror or "operating-system error").lower()
    return f"{where}{why}"

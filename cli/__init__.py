"""The `gpu-advisor` command: a thin click group on top of `advisor`, `pricing` and `reports`.

This package is the composition root: it imports the library packages, none of them imports
it (tests/test_layers.py). Subcommands live one per module (`cli/estimate.py`, ...) and are
imported only when used, so `gpu-advisor estimate` never pays for pandas, matplotlib or the
price sheets. Errors carrying an `exit_code` become one line on stderr (no traceback unless
--debug); `cli/output.py` is the one place results become tables, CSV and Markdown.
"""

from __future__ import annotations

import importlib
import sys

import click

from advisor.errors import validation_message

# name -> "module:attribute" of the click command
COMMANDS = {
    "estimate": "cli.estimate:estimate",
    "plan": "cli.plan:plan",
    "prices": "cli.prices:prices",
    "report": "cli.report:report",
    "launch": "cli.launch:launch",
    "models": "cli.models:models",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name in COMMANDS if self._load(name) is not None]

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        return self._load(name)

    @staticmethod
    def _load(name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module, attr = target.split(":")
        return getattr(importlib.import_module(module), attr)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.version_option(package_name="gpu-cost-advisor")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Will this fine-tuning run fit, on which instance, how long, and what will it cost?"""
    ctx.obj = {"debug": debug}


def main(argv: list[str] | None = None) -> None:
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        cli.main(args=argv, prog_name="gpu-advisor", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(1)
    except click.UsageError as exc:  # bad option or value: one line, no usage dump
        click.echo(f"error: {exc.format_message()}", err=True)
        sys.exit(2)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("Interrupted.", err=True)
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - the one place errors become exit codes
        if debug:
            raise
        code = getattr(exc, "exit_code", None)
        if isinstance(code, int):
            click.echo(f"error: {first_line(exc)}", err=True)
            sys.exit(code)
        if type(exc).__name__ == "ValidationError":  # pydantic, raised from user input
            click.echo(f"error: {validation_message(exc)}", err=True)
            sys.exit(2)
        click.echo(f"error: {type(exc).__name__}: {first_line(exc)} (rerun with --debug for details)", err=True)
        sys.exit(1)
    sys.exit(0)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]

"""The ``memtap`` command. Commands import their heavy dependencies when they run,
so ``memtap --help`` starts fast."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from memtap import __version__
from memtap.errors import MemtapError

__all__ = ["cli", "main"]


class MemtapCommandError(click.ClickException):
    """A MemtapError shown as one line, exit code 2."""

    exit_code = 2

    def show(self, file: Any = None) -> None:
        click.echo(f"memtap: error: {self.format_message()}", err=True)


class MemtapGroup(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except MemtapError as exc:
            raise MemtapCommandError(str(exc)) from exc
        except BrokenPipeError:
            raise  # the reader of our output went away (`| head`): main() exits quietly
        except OSError as exc:  # a path the command could not use: say which and why, no traceback
            where = f"{exc.filename}: " if exc.filename else ""
            raise MemtapCommandError(f"{where}{exc.strerror or exc}") from exc


@click.group(cls=MemtapGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="memtap")
def cli() -> None:
    """memtap: see what an agent writes to, changes in, deletes from and reads
    back out of its long-term memory."""


def _register() -> None:
    from memtap.cli import (
        demo,
        findings,
        hw,
        items,
        proxy,
        purge,
        replay,
        score,
        serve,
        suite,
        trace,
        ui,
        verify,
    )

    cli.add_command(serve.serve)
    cli.add_command(trace.trace)
    cli.add_command(items.items)
    cli.add_command(purge.purge)
    cli.add_command(demo.demo)
    cli.add_command(proxy.proxy)
    cli.add_command(proxy.init_config)
    cli.add_command(suite.suite)
    cli.add_command(replay.replay)
    cli.add_command(score.score)
    cli.add_command(score.compare)
    cli.add_command(verify.verify)
    cli.add_command(hw.hw)
    cli.add_command(ui.ui)
    cli.add_command(ui.report)
    cli.add_command(ui.datasette_metadata_command)
    cli.add_command(findings.check)
    cli.add_command(findings.findings)


_register()


def main() -> None:
    try:
        cli.main(prog_name="memtap")
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        # Python's advice: point stdout at devnull so the interpreter's own flush cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)

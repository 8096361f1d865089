"""Every help page of the ``commbench`` front door formats (argparse %-formats help text)."""

from __future__ import annotations

import argparse
import contextlib
import io
import subprocess
import sys

import pytest

from commbench import cli


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_top_level_help():
    proc = subprocess.run([sys.executable, "-m", "commbench", "--help"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "compare" in proc.stdout and "run" in proc.stdout


@pytest.mark.parametrize("name", sorted(_subcommands()))
def test_subcommand_help(name):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exc:
        cli.build_parser().parse_args([name, "--help"])
    assert exc.value.code == 0
    assert out.getvalue().startswith("usage: ")

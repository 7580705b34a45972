"""Every command explains itself (issue 70): its --help says what it does, what every argument and
option is, and gives one example that the parser accepts."""

from __future__ import annotations

import argparse
import shlex

import pytest

from stagebench.cli import EXAMPLES, build_parser, main


def _commands() -> dict[str, argparse.ArgumentParser]:
    p = build_parser()
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_every_command_has_a_description_every_argument_a_help_and_an_example_the_parser_accepts():
    commands = _commands()
    assert set(EXAMPLES) == set(commands)  # one example per command, none for a command that is gone
    for name, parser in commands.items():
        assert parser.description, name
        missing = [a.dest for a in parser._actions if not a.help]
        assert not missing, f"{name}: no help for {missing}"
        args = shlex.split(EXAMPLES[name])
        assert args[:2] == ["stagebench", name]
        build_parser().parse_args(args[1:])  # raises SystemExit on an example that does not parse
        assert EXAMPLES[name] in parser.format_help()


def test_help_prints_the_description_the_defaults_and_the_example(capsys):
    with pytest.raises(SystemExit) as done:
        main(["compare", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    flat = " ".join(out.split())  # argparse wraps lines at the terminal's width
    assert "two run folders' stage tables side by side" in flat
    assert "(default: 10000)" in flat and "the first results folder (A)" in flat
    assert "example:\n  stagebench compare results/default results/default-trained" in out

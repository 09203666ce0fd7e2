"""Number flags of every command refuse ``nan`` and ``inf`` naming the flag: ``float()``
reads both, and click's ``FloatRange`` lets ``nan`` through any bounds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from apportion.cli.main import main
from apportion.cli.numbers import FiniteFloatRange


def commands(group: click.Group, ctx: click.Context) -> Iterator[tuple[str, click.Command]]:
    """Every command under ``group``, by its name as typed (``budgets set``)."""
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None
        if isinstance(cmd, click.Group):
            for sub, subcmd in commands(cmd, click.Context(cmd, parent=ctx)):
                yield f"{name} {sub}", subcmd
        else:
            yield name, cmd


def float_params() -> list[tuple[str, click.Parameter]]:
    ctx = click.Context(main)
    return [(f"{name} {param.opts[0] if isinstance(param, click.Option) else param.name}",
             param)
            for name, cmd in commands(main, ctx) for param in cmd.params
            if isinstance(param.type, click.types.FloatParamType)]


def test_every_float_flag_of_the_cli_is_a_finite_float_range() -> None:
    """Every option or argument of every command that reads a float is a FiniteFloatRange
    (simulate, sweep and bench --days, budgets' weights, queue --watch), so a float flag
    added with click's own float type, which passes nan, fails here."""
    found = float_params()
    assert {name for name, _ in found} >= {"simulate --days", "sweep --days", "bench --days",
                                           "budgets set weight", "budgets set --weight",
                                           "budgets create --weight", "queue --watch"}
    assert [name for name, param in found
            if not isinstance(param.type, FiniteFloatRange)] == []


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "NaN"])
def test_every_float_flag_refuses_a_number_that_is_not_finite(text: str) -> None:
    """Each float flag refuses nan and inf (any case, either sign) as not a finite number."""
    for name, param in float_params():
        with pytest.raises(click.BadParameter, match=f"^{text} is not a finite number.$"):
            param.type.convert(text, param, None)
        assert param.type.convert("1", param, None) == 1.0, name


@pytest.mark.parametrize("command", [
    ("simulate", "--trace", "{trace}", "--quiet", "--out", "{out}"),
    ("sweep", "--trace", "{trace}", "--grid", "lookback=1d", "--quiet", "--out", "{out}"),
    ("bench", "--trace", "{trace}"),
    ("simulate", "--scenario", "small", "--quiet", "--out", "{out}"),
])
def test_days_nan_is_refused_naming_the_flag(tmp_path: Path, command: tuple[str, ...]) -> None:
    """--days nan (simulate and sweep crashed in the report, or wrote an empty row; bench
    timed nothing; with --scenario the error named --scenario) is a usage error naming
    --days, before anything runs."""
    trace = tmp_path / "t.csv"
    trace.write_text("id,submit_time,budget,gpus,duration\nu1,0,a,8,7200\n")
    args = [a.format(trace=trace, out=tmp_path / "out") for a in command]
    result = CliRunner().invoke(main, [*args, "--cluster", "1x8", "--days", "nan"])
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--days': nan is not a finite number." in result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("flag", "text", "bounds"), [
    ("queue --watch", "0", "0<x<=86400"),
    ("queue --watch", "1e5", "0<x<=86400"),
    ("simulate --days", "5000", "0<x<=3660"),
])
def test_a_float_flag_out_of_its_range_is_refused_naming_the_value_as_typed(
        flag: str, text: str, bounds: str) -> None:
    """A float flag's value outside its bounds is refused as typed (``--watch 0``: "0 is
    not in the range", where click wrote the float it read, "0.0"; ``1e5``, not
    "100000.0")."""
    [param] = [p for name, p in float_params() if name == flag]
    with pytest.raises(click.BadParameter,
                       match=f"^{text} is not in the range {bounds}.$"):
        param.type.convert(text, param, None)


@pytest.mark.parametrize(("args", "said"), [
    (("budgets", "set", "ai", "-1"), "Invalid value for 'WEIGHT': -1 is out of range"),
    (("budgets", "set", "ai", "--weight", "0"), "Invalid value for '--weight': 0 is out of range"),
    (("budgets", "create", "ai/x", "--weight", "1e9"),
     "Invalid value for '--weight': 1e9 is out of range"),
    (("budgets", "set", "ai", "abc"), "Invalid value for 'WEIGHT': 'abc' is not a number"),
])
def test_a_weight_out_of_range_is_refused_in_words_with_the_range_readable(
        args: tuple[str, ...], said: str) -> None:
    """A weight ``budgets set`` (WEIGHT or --weight) or ``budgets create --weight`` refuses
    names the argument or flag as typed (``WEIGHT``, not click's ``[WEIGHT]``) and the range
    in readable numbers, ``a weight is a number from 0.000001 to 1,000,000``, not click's
    ``-1 is not in the range 1e-06<=x<=1000000.0`` (exit 2, before any request)."""
    r = CliRunner().invoke(main, [*args, "--url", "http://127.0.0.1:9"])
    assert r.exit_code == 2, r.output
    assert r.stderr.splitlines()[-1] == (
        f"Error: {said}: a weight is a number from 0.000001 to 1,000,000")

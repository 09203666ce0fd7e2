"""Number flags that take finite numbers only: ``float()`` reads ``nan`` and ``inf``, and
click's ``FloatRange`` lets ``nan`` through any bounds (every comparison with it is false),
so such a flag would pass on a value no command can use."""

from __future__ import annotations

import math

import click

MAX_DAYS = 3660  # ten years: a run keeps a row per simulated hour and budget
# --budgets: a run keeps a row per budget and simulated hour, so a typo with extra zeros
# (150 -> 150000) would run for hours on gigabytes; no organisation funds more leaves
MAX_BUDGETS = 10_000
# points of a sweep (combinations of its --grid values x seeds): a 100 x 100 grid, or
# 2,000 combinations x 5 seeds, hours of CPU on a large Ray cluster; a grid that multiplies
# past it is a value list pasted too long or a --grid too many
MAX_POINTS = 10_000


class FiniteFloatRange(click.FloatRange):
    """``click.FloatRange`` that also refuses ``nan`` and ``inf``, naming the flag and the
    value as typed (``0 is not in the range 0<x<=86400``, where click wrote ``0.0``)."""

    def convert(self, value: float, param: click.Parameter | None,
                ctx: click.Context | None) -> float:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value} is not a finite number.", param, ctx)
        try:
            return super().convert(number, param, ctx)
        except click.BadParameter:
            self.fail(f"{value} is not in the range {self._describe_range()}.", param, ctx)


def readable(number: float) -> str:
    """A bound as people write it: ``0.000001``, ``1,000,000`` (not ``1e-06``, ``1e+06``)."""
    return f"{number:,.6f}".rstrip("0").rstrip(".")


class ReadableRange(FiniteFloatRange):
    """A :class:`FiniteFloatRange` (closed: ``min`` to ``max``) whose refusals are the
    product's words, naming the argument or flag as typed (``WEIGHT``, not click's
    ``[WEIGHT]`` of an optional argument) and the range in readable numbers: ``Invalid
    value for 'WEIGHT': -1 is out of range: a weight is a number from 0.000001 to
    1,000,000``, where click wrote ``-1 is not in the range 1e-06<=x<=1000000.0``."""

    def __init__(self, what: str, min: float, max: float) -> None:  # noqa: A002 (click's)
        super().__init__(min=min, max=max)
        self.what = what

    def convert(self, value: float, param: click.Parameter | None,
                ctx: click.Context | None) -> float:
        hint = None
        if param is not None:
            hint = repr(param.opts[0] if isinstance(param, click.Option)
                        else param.human_readable_name)
        assert self.min is not None and self.max is not None
        rule = f"{self.what} is a number from {readable(self.min)} to {readable(self.max)}"
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise click.BadParameter(f"{value!r} is not a number: {rule}", ctx, param,
                                     hint) from None
        if math.isfinite(number) and not (self.min <= number <= self.max):
            raise click.BadParameter(f"{value} is out of range: {rule}", ctx, param, hint)
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter as e:  # nan, inf: said as every float flag says it
            raise click.BadParameter(e.message, ctx, param, hint) from None


# ``--days`` of ``simulate``, ``sweep`` and ``bench``: one definition, so that each refuses
# what the others refuse
days_option = click.option(
    "--days", type=FiniteFloatRange(min=0, min_open=True, max=MAX_DAYS),
    help=f"simulated days, at most {MAX_DAYS:,} (default: the scenario's; a trace's whole "
         "days up to the day of its last submission, included)")


__all__ = ["MAX_BUDGETS", "MAX_DAYS", "MAX_POINTS", "FiniteFloatRange", "ReadableRange",
           "days_option", "readable"]

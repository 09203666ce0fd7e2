"""The one command, ``apportion``. Subcommands live in their own modules and are imported
lazily so ``apportion --help`` and the client commands start fast."""

from __future__ import annotations

import importlib

import click

from apportion.cli.environ import limit_openblas_threads

limit_openblas_threads()  # before any subcommand imports NumPy

# subcommand name -> "module:attribute" of a click.Command
_COMMANDS: dict[str, str] = {
    "init": "apportion.cli.init:init",
    "report": "apportion.cli.report:report",
    "simulate": "apportion.cli.simulate:simulate",
    "sweep": "apportion.cli.simulate:sweep",
    "bench": "apportion.cli.bench:bench",
    "export-trace": "apportion.cli.whatif:export_trace",
    "whatif": "apportion.cli.whatif:whatif",
    "serve": "apportion.cli.serve:serve",
    "submit": "apportion.cli.jobs:submit",
    "queue": "apportion.cli.jobs:queue",
    "show": "apportion.cli.client:show",
    "cancel": "apportion.cli.jobs:cancel",
    "logs": "apportion.cli.jobs:logs",
    "budgets": "apportion.cli.client:budgets",
    "hosts": "apportion.cli.client:hosts",
    "audit": "apportion.cli.client:audit",
    "why": "apportion.cli.client:why",
    "users": "apportion.cli.client:users",
    "tokens": "apportion.cli.client:tokens",
    "order": "apportion.cli.jobs:order",
}


# Slurm's commands, typed after `apportion` by habit: what to type instead (docs/cli.md's
# table), said in the error rather than click's bare "No such command"
_SLURM_COMMANDS: dict[str, str] = {
    "sbatch": "'apportion submit'", "squeue": "'apportion queue'",
    "scancel": "'apportion cancel'", "scontrol": "'apportion show ID'",
    "sprio": "'apportion order'", "sshare": "'apportion order'",
    "sinfo": "'apportion hosts list'", "sacctmgr": "'apportion budgets'",
    "sacct": "'apportion show ID' (one job) or 'apportion report usage'",
}


class _LazyGroup(click.Group):
    def resolve_command(self, ctx: click.Context, args: list[str],
                        ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name in _SLURM_COMMANDS and name not in _COMMANDS:
            ctx.fail(f"No such command {name!r}: that is Slurm's; apportion's is "
                     f"{_SLURM_COMMANDS[name]} (docs/cli.md maps Slurm's commands)")
        return super().resolve_command(ctx, args)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = _COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, attr = target.split(":")
        cmd = getattr(importlib.import_module(module), attr)
        assert isinstance(cmd, click.Command)
        return cmd


def _version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``--version``: the release, and the store schema its server migrates a database to
    (what ``GET /v1/health`` says of a running server)."""
    if not value or ctx.resilient_parsing:
        return
    from apportion import __version__
    from apportion.service.store.store import newest_revision  # not on every start: slow

    click.echo(f"apportion {__version__} (store schema {newest_revision()})")
    ctx.exit()


@click.group(cls=_LazyGroup)
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_version,
              help="Show the version and the store schema it wants, and exit.")
def main() -> None:
    """apportion: GPU-time budgets, hierarchical fair share and a minimum-runtime contract."""


if __name__ == "__main__":
    main()

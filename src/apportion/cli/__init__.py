"""The ``apportion`` command: :func:`apportion.cli.main.main` is the console script's entry
point. Subcommands live in their own modules, loaded when first used, so nothing is
imported here."""

__all__: list[str] = []

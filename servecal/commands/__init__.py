"""One module per ``servecal`` command group.

Each module defines ``register(app: typer.Typer) -> None`` and is discovered by
``servecal.cli``; adding a command is adding one file here. Modules import their
stage lazily inside the command so that ``servecal --help`` stays fast.
"""

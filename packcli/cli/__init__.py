"""The ``packcli`` command line: thin commands that parse, build a config, call the library, render.

    app.py      the typer app: wiring, the error table, exit codes
    options.py  options shared by several commands, declared once
    pack.py, verify.py, stats.py, show.py   one module per command
    console.py  the terminal: results on stdout, progress and logs on stderr
    output.py   human and JSON renderings of results
    help_page.py  the --help pages
"""

from packcli.cli.app import app, main

__all__ = ["app", "main"]

"""``python -m packcli``."""

from packcli.cli import main

main()

"""`python -m pipec ...` is the `pipec` command."""

from .cli import main

main()

"""`python -m cli`: the same command as the `speedwatch` entry point."""

from cli.main import main

main()

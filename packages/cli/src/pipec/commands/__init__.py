"""The `pipec` commands, one module per command or group of related commands; `pipec.cli`
builds the typer app from them. Each command's docstring is its help text."""

"""An example pipec plugin package (see README.md)."""

__version__ = "0.1.0"

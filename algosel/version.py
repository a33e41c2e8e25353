"""The package version (one definition, read by the manifest of every trained model)."""

__version__ = "0.1.0"

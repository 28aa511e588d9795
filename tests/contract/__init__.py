"""contract tests (see tests/README.md)."""

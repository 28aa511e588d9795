"""Logging for the command line: rich on a terminal, plain lines elsewhere, always to stderr."""

from __future__ import annotations

import logging
import sys

from rich.console import Console
from rich.logging import RichHandler


def configure_logging(level: str = "INFO") -> None:
    console = Console(stderr=True)
    if sys.stderr.isatty():
        handler: logging.Handler = RichHandler(console=console, show_path=False, rich_tracebacks=True)
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    logging.getLogger("nats").setLevel(logging.WARNING)


__all__ = ["configure_logging"]

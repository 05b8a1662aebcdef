"""An operator's terminal for commands that ask before they erase (``sys.stdin`` stand-in)."""

from __future__ import annotations

import io


class Terminal(io.StringIO):
    """What the operator types, line by line, on a stdin that is a terminal."""

    def isatty(self) -> bool:
        return True

"""The exceptions sweeper raises on purpose.

Every error a user can cause or meet derives from :class:`SweeperError`; the CLI turns it into a
one-line message (never a traceback). Each one says what happened, the value that caused it and,
where there is one, the fix.

::

    SweeperError
    ├── ConfigError            a bad option or argument value (names the value and the fix)
    ├── TraceError             a trace set on disk that cannot be read as written
    │   ├── SchemaVersionError   a schema version this sweeper does not know
    │   └── TraceFormatError     a bad line or field (names the file and the line)
    ├── ImportFormatError      a foreign tool's file that is not what its importer expects
    ├── ServerError            the target server cannot be used
    │   └── ServerUnreachable    nothing answers at the base URL
    └── ErrorRateExceeded      a sweep level failed more often than --max-error-rate allows
"""

from __future__ import annotations

from pathlib import Path


class SweeperError(Exception):
    """Base of every error sweeper raises on purpose."""


class ConfigError(SweeperError):
    """An option or argument has a value sweeper cannot use."""


class TraceError(SweeperError):
    """A trace set on disk cannot be read."""

    def __init__(self, message: str, path: Path | str | None = None, line: int | None = None):
        self.path = Path(path) if path is not None else None
        self.line = line
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        super().__init__(where + message)


class SchemaVersionError(TraceError):
    """The trace set was written with a schema version this sweeper does not support."""


class TraceFormatError(TraceError):
    """A line or field of a trace file does not match the schema."""


class ImportFormatError(SweeperError):
    """A file given to ``sweeper import`` is not what the named importer reads."""

    def __init__(self, message: str, path: Path | str | None = None, where: str | None = None):
        self.path = Path(path) if path is not None else None
        self.where = where
        prefix = ""
        if path is not None:
            prefix = f"{path}" + (f" ({where})" if where else "") + ": "
        super().__init__(prefix + message)


class ServerError(SweeperError):
    """The target server cannot be used for a sweep."""


class ServerUnreachable(ServerError):
    """Nothing answers at the base URL."""


class ErrorRateExceeded(SweeperError):
    """A level's error rate passed ``--max-error-rate``; the sweep stopped."""

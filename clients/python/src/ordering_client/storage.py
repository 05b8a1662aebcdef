"""Where the client keeps what must survive a crash: the diner's session and the key of every
unfinished operation.

An app that crashed after sending an order but before reading the answer must, after a
restart, send the order again with the *same* key and the *same* diner (keys are scoped per
diner), or it orders twice. :class:`JsonFileStorage` keeps both in a file; any object with
``get``/``set``/``delete`` of strings (a keyring, a database row) works as well.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from collections.abc import Hashable
from pathlib import Path
from typing import Protocol


class Storage(Protocol):
    def get(self, key: str) -> str | None: ...
    def set(self, key: str, value: str) -> None: ...
    def delete(self, key: str) -> None: ...


def shared_identity(storage: object) -> Hashable:
    """What two storages share when they hold the same entries: a :class:`JsonFileStorage`'s
    file, any other storage object itself."""
    if isinstance(storage, JsonFileStorage):
        return ("file", storage.path)
    return ("object", id(storage))


_FILE_LOCKS: dict[Path, threading.Lock] = {}
_FILE_LOCKS_LOCK = threading.Lock()


class MemoryStorage:
    """Keys live as long as the process (the default): retries within a call, and later
    calls of the same client, reuse them; a restart forgets them."""

    def __init__(self) -> None:
        self._items: dict[str, str] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> str | None:
        with self._lock:
            return self._items.get(key)

    def set(self, key: str, value: str) -> None:
        with self._lock:
            self._items[key] = value

    def delete(self, key: str) -> None:
        with self._lock:
            self._items.pop(key, None)


class JsonFileStorage:
    """One JSON object in ``path``, rewritten whole on every change through a temporary file
    and an atomic rename, so a crash mid-write leaves the previous version, never half a file.
    For one process at a time (an app's own data directory); within it, any number of
    clients and storages of the same file share its entries and its running operations."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).expanduser().resolve()
        # one lock per file in this process: two storages of one file would each rewrite the
        # whole file and lose the other's change
        with _FILE_LOCKS_LOCK:
            self._lock = _FILE_LOCKS.setdefault(self.path, threading.Lock())

    def get(self, key: str) -> str | None:
        with self._lock:
            return self._load().get(key)

    def set(self, key: str, value: str) -> None:
        with self._lock:
            items = self._load()
            items[key] = value
            self._save(items)

    def delete(self, key: str) -> None:
        with self._lock:
            items = self._load()
            if items.pop(key, None) is not None:
                self._save(items)

    def _load(self) -> dict[str, str]:
        try:
            return json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}

    def _save(self, items: dict[str, str]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(items, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

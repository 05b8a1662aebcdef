"""Which models' queries Django compiles to SQL: for tests of SQL compiled once per process."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

from django.db.models.sql.compiler import SQLCompiler


@contextmanager
def compiled_models() -> Iterator[list[type]]:
    """The model of each query compiled inside the block, in order."""
    compiled: list[type] = []
    real = SQLCompiler.as_sql

    def counting(compiler: SQLCompiler, *args: object, **kwargs: object) -> object:
        compiled.append(compiler.query.model)
        return real(compiler, *args, **kwargs)

    with mock.patch.object(SQLCompiler, "as_sql", counting):
        yield compiled

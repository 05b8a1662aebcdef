"""A host's own SQLite backend, under a module name that does not end in ``sqlite3`` (as
GeoDjango's ``django.contrib.gis.db.backends.spatialite``, or a backend that sets pragmas):
the engine runs on it as on SQLite, and its system checks must see SQLite in it."""

from django.db.backends.sqlite3.base import DatabaseWrapper as SQLiteDatabaseWrapper


class DatabaseWrapper(SQLiteDatabaseWrapper):
    pass

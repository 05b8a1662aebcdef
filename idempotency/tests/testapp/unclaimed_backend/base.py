"""A database backend of a vendor the engine has no statements for, as MySQL, MariaDB or
Oracle are (their drivers are not installed here): SQLite's backend under another vendor name,
for the system check that refuses such a ``DATABASES["default"]``."""

from django.db.backends.sqlite3.base import DatabaseWrapper as SQLiteDatabaseWrapper


class DatabaseWrapper(SQLiteDatabaseWrapper):
    vendor = "unclaimed"
    display_name = "Unclaimed"

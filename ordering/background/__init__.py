"""Work that leaves the request: the transactional outbox, the Celery tasks that consume it,
the cancel saga and dead letters.

Imports run one way (checked by the import contracts in ``pyproject.toml``):
``tasks`` → ``consumers`` → ``saga`` → ``dead_letters`` / ``outbox`` → ``dispatch``.
The lower modules send messages by task *name* (:mod:`~ordering.background.dispatch`), so
none of them imports the tasks.
"""

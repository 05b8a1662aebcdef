"""The engine's contract: what every version of the engine and of its Lua scripts keeps.

``manage.py check_lua_version`` runs this package, in a sandbox, against a candidate script
(``IDEMPOTENCY_FORCE_SCRIPTS``); tests marked ``slow`` are left out by ``--quick``.
"""

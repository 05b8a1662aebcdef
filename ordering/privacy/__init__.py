"""Data-protection requests: erase one diner (:mod:`.diners`), give one diner a copy of their
data (:mod:`.diner_export`), offboard a whole tenant
(:mod:`.offboarding`, with its archive in :mod:`.archive` and its table walk in
:mod:`.tenant_tables`). ``docs/data-protection.md`` says what is kept where."""

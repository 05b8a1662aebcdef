"""Related rows a service already holds, handed to the ORM as if they had been prefetched.

A service that has just written an order, its lines and its first transition holds every row
an answer shows. Reading them back to serialize the answer would cost one query per relation
(four for an order) inside the write's transaction. Django's prefetch cache is where
``order.lines.all()`` looks first, so filling it with the objects in hand lets serializers
and templates render them with no query. The objects are the ones saved, so they hold what
the database holds (``tests/ordering/test_placing.py`` compares an answer with a re-read).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from django.db.models import ForeignKey, Model, QuerySet
from django.db.models.manager import BaseManager
from django.db.models.query import get_related_populators

from idempotency.core.transactions import statements_ride_along


def with_related(instance: Model, **related: Sequence[Model]) -> Model:
    """``instance`` with ``related`` (related name -> the complete list of its rows, in the
    relation's ordering) as its prefetched reverse relations; returns ``instance``."""
    cache = instance.__dict__.setdefault("_prefetched_objects_cache", {})
    for name, rows in related.items():
        queryset = _relation_queryset(instance, name)
        queryset._result_cache = list(rows)
        queryset._prefetch_done = True
        cache[name] = queryset
    return instance


def _relation_queryset(instance: Model, name: str) -> QuerySet:
    """The queryset of ``instance``'s reverse relation ``name``, as Django's related manager
    makes it: the related model's default queryset, the router's hint, the rows' parent known,
    and the filter on ``instance``, deferred (Django's own way) until the queryset is chained.

    Made directly where the relation is a plain foreign key to ``instance``'s key and the
    default manager's queryset is the plain one: through the manager it costs a manager, a
    query and two clones of it, about 14 µs per relation here against 4 (an order's answer
    holds three relations, a page of the order list forty). Elsewhere, the manager's."""
    field = instance._meta.get_field(name).field
    manager = field.model._default_manager
    if (
        type(manager).get_queryset is not BaseManager.get_queryset
        or field.target_field != instance._meta.pk
        or instance.pk is None
    ):
        return getattr(instance, name).get_queryset()
    queryset = manager._queryset_class(model=field.model, hints={"instance": instance})
    queryset._deferred_filter = (False, (), {field.name: instance})
    queryset._known_related_objects = {field: {instance.pk: instance}}
    return queryset


@dataclass(frozen=True)
class _RelationRead:
    """How one reverse relation of a model is read for any of its instances: Django's SQL for
    it (the instance's key its one parameter), the related model, the foreign key that points
    back (its rows are handed the instance through it, as Django's own relation reads do) and
    whether a column needs a converter (the database's driver does not return the field's
    Python value)."""

    sql: str
    model: type[Model]
    back: ForeignKey
    converted: bool
    tenant_field: ForeignKey | None  # the related model's ``tenant``, if it has one


# per (model, relation, database): the relation's read, compiled once (a relation whose SQL
# takes more than the instance's key is not kept, and is read as Django reads it)
_READS: dict[tuple[type[Model], str, str], _RelationRead] = {}


def read_related(instance: Model, *names: str) -> Model:
    """``instance`` with its reverse relations ``names`` read from the database and kept as
    prefetched (:func:`with_related`); returns ``instance``.

    What ``instance.<name>.all()`` would read, in the relation's ordering, without building
    the query again for every instance: Django compiles a query afresh each time it runs,
    which cost more of a worker's CPU than running it (about 190 of 470 µs per relation,
    measured in one process; ``docs/benchmarks.md``). The text is compiled once per relation.
    Rows become instances as Django makes them from any query (``Model.from_db``), each
    holding ``instance`` (and its tenant); on PostgreSQL every relation goes in one query of
    several statements, one round trip. A relation with a column that needs a converter (on
    the embedded demo's SQLite, decimals and times) is read through ``raw()``, which applies
    the database's converters."""
    using = instance._state.db or DEFAULT_DB_ALIAS
    reads = {name: _read_of(type(instance), name, using, instance) for name in names}
    plain = {name: read for name, read in reads.items() if read and not read.converted}
    if statements_ride_along(using):
        groups = [plain] if plain else []
    else:
        groups = [{name: read} for name, read in plain.items()]
    related: dict[str, list[Model]] = {}
    for group in groups:
        with connections[using].cursor() as cursor:
            cursor.execute(_statements(group), _parameters(group, instance))
            related |= _fetched(cursor, group, instance, using)
    for name, read in reads.items():
        if name in related:
            continue
        if read is None:
            related[name] = list(getattr(instance, name).all())
            continue
        raw = read.model._base_manager.db_manager(using).raw(read.sql, [instance.pk])
        related[name] = _handed(list(raw), read, instance)
    return with_related(instance, **related)


def read_related_of(instances: Sequence[Model], *names: str, using: str) -> bool:
    """Each of ``instances`` (of one model, with distinct keys) with its reverse relations
    ``names`` read and held (:func:`with_related`), each row handed its instance: one query of
    one statement per relation, by the instances' keys, whose text is compiled once per
    relation and number of instances (so a page of at most N instances has at most N shapes).
    What Django's ``prefetch_related_objects`` reads, without building and compiling its
    queries and the prefetch's querysets again for every page. False, and nothing read, where
    statements do not ride along or a relation's columns need a converter."""
    if not instances or not statements_ride_along(using):
        return False
    model = type(instances[0])
    keys = [instance.pk for instance in instances]
    reads = {}
    for name in names:
        read = _read_of_many(model, name, keys, using)
        if read is None:
            return False
        reads[name] = read
    by_key: dict[object, dict[str, list[Model]]] = {key: {} for key in keys}
    with connections[using].cursor() as cursor:
        cursor.execute(_statements(reads), keys * len(reads))
        for name, read, rows in _results(cursor, reads, using):
            for held in by_key.values():
                held[name] = []
            for row in rows:
                by_key[getattr(row, read.back.attname)][name].append(row)
    for instance in instances:
        for name, read in reads.items():
            _handed(by_key[instance.pk][name], read, instance)
        with_related(instance, **by_key[instance.pk])
    return True


# per (model, relation, number of instances, database): the relation's read for that many
# instances, compiled once
_READS_OF_MANY: dict[tuple[type[Model], str, int, str], _RelationRead] = {}


def _read_of_many(
    model: type[Model], name: str, keys: list[object], using: str
) -> _RelationRead | None:
    """The read of relation ``name`` of ``len(keys)`` instances of ``model`` (their keys its
    parameters), in the relation's ordering; None where it cannot be kept (a column needs a
    converter, the keys are not its parameters as given)."""
    key = (model, name, len(keys), using)
    known = _READS_OF_MANY.get(key)
    if known is not None:
        return known
    back = model._meta.get_field(name).field
    rows = back.model._base_manager.db_manager(using).filter(**{f"{back.name}__in": keys})
    compiled = compiled_read(rows, keys, using=using)
    if compiled is None or compiled[1]:
        return None
    _READS_OF_MANY[key] = _relation_read(model, name, *compiled)
    return _READS_OF_MANY[key]


def read_with_related(
    model: type[Model],
    lead: str,
    lead_params: list[object],
    *,
    probe: Model,
    reads: dict[str, _RelationRead],
    using: str,
) -> Model | None:
    """The row of ``model`` with ``probe``'s key that ``lead`` (a statement selecting every
    concrete column of ``model`` in field order, with ``lead_params``; it decides who may read
    the row, e.g. by tenant) reads, if it reads one, with the reverse relations of ``reads``
    (:func:`reads_together`) held: the row and every relation in one query, one round trip.
    The relations' statements are Django's own for them (by the row's key, which their index
    serves); when ``lead`` reads nothing, what they read is dropped unseen. The row is handed
    the tenant ``probe`` holds.

    Outside a transaction the query is one snapshot (:func:`_one_snapshot`): each statement
    of a query reads the database as it is when that statement starts, so a row and its
    relations read by statements one after another could come from two moments, an order
    PAYING with its payment succeeded (a callback committing between them)."""
    tenant = probe.tenant
    connection = connections[using]
    statements = "; ".join([lead, *(read.sql for read in reads.values())])
    alone = bool(reads) and not connection.in_atomic_block
    with connection.cursor() as cursor:
        if alone:
            _one_snapshot(
                connection, cursor, statements, [*lead_params, *_parameters(reads, probe)]
            )
        else:
            cursor.execute(statements, [*lead_params, *_parameters(reads, probe)])
        found = cursor.fetchall()
        if not found:
            return None
        [values] = found
        row = model.from_db(using, _attnames(model), values)
        model._meta.get_field("tenant").set_cached_value(row, tenant)
        if not reads:
            return row
        cursor.nextset()
        return with_related(row, **_fetched(cursor, reads, row, using))


def _one_snapshot(
    connection: BaseDatabaseWrapper, cursor: CursorWrapper, statements: str, params: list[object]
) -> None:
    """Run ``statements`` (several, riding along in one query) as a read-only transaction of
    their own at REPEATABLE READ, in that one query: every statement sees the database as the
    first one did, and no round trip is added. A read-only transaction is never refused for
    a write committed meanwhile. The cursor is left on the first statement's result.

    An error in one of them leaves the server in the failed transaction the query opened
    (the rest of the query, its ``COMMIT`` included, is skipped): it is rolled back here, as
    the connection's next query would otherwise fail."""
    try:
        cursor.execute(
            f"BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY; {statements}; COMMIT", params
        )
    except Exception:
        with suppress(Exception):  # a connection gone is closed by Django after the request
            connection.connection.rollback()
        raise
    cursor.nextset()  # past the BEGIN's result


def reads_together(
    model: type[Model], names: Sequence[str], *, using: str, probe: Model
) -> dict[str, _RelationRead] | None:
    """The reads of ``model``'s relations ``names`` for :func:`read_with_related` (``probe``: an
    instance with a key and its tenant, for a first compilation); None where they cannot ride
    along with a row's statement (another database than PostgreSQL, a relation read as Django
    reads it, a column that needs a converter)."""
    if not statements_ride_along(using):
        return None
    reads: dict[str, _RelationRead] = {}
    for name in names:
        read = _read_of(model, name, using, probe)
        if read is None or read.converted:
            return None
        reads[name] = read
    return reads


def _read_of(model: type[Model], name: str, using: str, probe: Model) -> _RelationRead | None:
    """The relation's read, compiled the first time from ``probe`` (an instance of ``model``
    with a key), through an instance of the same key that holds nothing prefetched, so that
    the query is the relation's own."""
    key = (model, name, using)
    known = _READS.get(key)
    if known is not None:
        return known
    rows = getattr(model(pk=probe.pk), name).all()
    compiled = compiled_read(rows, [probe.pk], using=using)
    if compiled is None:
        return None  # not kept: a later instance compiles it again
    _READS[key] = _relation_read(model, name, *compiled)
    return _READS[key]


def _relation_read(model: type[Model], name: str, sql: str, converted: bool) -> _RelationRead:
    """Relation ``name`` of ``model`` read by ``sql``: its model, the foreign key back, and the
    related model's ``tenant`` field if it has one."""
    back = model._meta.get_field(name).field
    related = back.model
    tenant_field = next((f for f in related._meta.concrete_fields if f.name == "tenant"), None)
    return _RelationRead(sql, related, back, converted, tenant_field)


def compiled_read(rows: QuerySet, params: list[object], *, using: str) -> tuple[str, bool] | None:
    """``rows``' SQL, for running again with other values of the same ``params``, and whether
    a column needs a converter; None where it cannot be: its compiled parameters are not
    ``params`` (in that order, each distinct, so that each keeps its place), or it does not
    select every concrete column of its model in field order (what ``Model.from_db`` takes)."""
    laid_out = _laid_out(rows, params, using=using)
    if laid_out is None:
        return None
    compiler, sql = laid_out
    columns = _selected(compiler)
    if [column.target.attname for column in columns] != _attnames(rows.model):
        return None
    return sql, _converted(compiler)


def _selected(compiler: Any) -> list[Any]:
    return [column for column, _, _ in compiler.select]


def _converted(compiler: Any) -> bool:
    """Whether a column the compiled query selects needs a converter (the database driver's
    value is not the field's)."""
    return bool(compiler.get_converters(_selected(compiler)))


def compiled_sql(rows: QuerySet, params: list[object], *, using: str) -> str | None:
    """``rows``' SQL, for running again with other values of the same ``params``; None where
    its compiled parameters are not ``params`` (in that order, each distinct)."""
    laid_out = _laid_out(rows, params, using=using)
    return None if laid_out is None else laid_out[1]


# per (what the read is, database): the SQL of a values read, compiled once (values_read)
_VALUES_READS: dict[tuple[Hashable, str], str] = {}


def values_read(
    name: Hashable, rows: Callable[[], QuerySet], params: list[object], *, using: str
) -> list[tuple[Any, ...]]:
    """The rows of the ``values_list()`` query that ``rows()`` builds, as plain tuples, read
    by its SQL compiled once per process and kept under ``name``: building and compiling
    Django's query costs more of a worker's CPU than a small read itself. ``params`` are the
    query's parameters, in the order it compiles them. A query whose parameters are not laid
    out so, or whose columns need a converter (the driver's values are not the fields', as for
    decimals on SQLite), is read through the ORM, and compiled again next time."""
    sql = _VALUES_READS.get((name, using))
    if sql is None:
        query = rows()
        laid_out = _laid_out(query, params, using=using)
        if laid_out is None or _converted(laid_out[0]):
            return list(query)
        sql = _VALUES_READS[(name, using)] = laid_out[1]
    with connections[using].cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _laid_out(rows: QuerySet, params: list[object], *, using: str) -> tuple[Any, str] | None:
    """``rows``' compiler and SQL, when its compiled parameters are ``params``, in that order,
    each distinct (so that each keeps its place when run with other values); else None."""
    compiler = rows.query.get_compiler(using=using)
    sql, compiled = compiler.as_sql()
    distinct = len({repr(param) for param in params}) == len(params)
    return (compiler, sql) if distinct and list(compiled) == params else None


def _statements(reads: dict[str, _RelationRead]) -> str:
    return "; ".join(read.sql for read in reads.values())


def _parameters(reads: dict[str, _RelationRead], instance: Model) -> list[object]:
    return [instance.pk] * len(reads)


def _fetched(
    cursor: CursorWrapper, reads: dict[str, _RelationRead], instance: Model, using: str
) -> dict[str, list[Model]]:
    """The rows of ``reads``' statements, one result each, from the cursor's current result
    on: each relation's instances, handed ``instance``."""
    return {
        name: _handed(rows, read, instance) for name, read, rows in _results(cursor, reads, using)
    }


def _results(
    cursor: CursorWrapper, reads: dict[str, _RelationRead], using: str
) -> Iterator[tuple[str, _RelationRead, list[Model]]]:
    """Each of ``reads``' statements with its rows as its model's instances (as Django makes
    them from any query, ``Model.from_db``), one result each, from the cursor's current
    result on."""
    for index, (name, read) in enumerate(reads.items()):
        if index:
            cursor.nextset()
        attnames = _attnames(read.model)
        yield (
            name,
            read,
            [read.model.from_db(using, attnames, values) for values in cursor.fetchall()],
        )


def _attnames(model: type[Model]) -> list[str]:
    return [field.attname for field in model._meta.concrete_fields]


def _handed(rows: list[Model], read: _RelationRead, instance: Model) -> list[Model]:
    """``rows``, each holding ``instance`` as the object its foreign key points to, and the
    instance's tenant where ``instance`` holds it and the row is of that tenant."""
    tenant = instance._state.fields_cache.get("tenant")
    for row in rows:
        read.back.set_cached_value(row, instance)
        if read.tenant_field is not None and tenant is not None and row.tenant_id == tenant.pk:
            read.tenant_field.set_cached_value(row, tenant)
    return rows


@dataclass(frozen=True)
class JoinedRead:
    """A query of a model with the rows its ``select_related`` joins, compiled once: run it
    again with other values of the same parameters (:meth:`first`), and its rows become
    instances exactly as Django's own iteration of the query makes them (each model's
    ``from_db``, the database's converters, the joined instances cached on their foreign
    keys), without compiling it again."""

    sql: str
    model: type[Model]
    converters: dict[int, Any]  # by column: the database's and the fields' converters
    fields: tuple[int, int]  # the main model's columns: row[start:end]
    attnames: list[str]
    populators: list[Any]

    @classmethod
    def of(cls, rows: QuerySet, params: list[object], *, using: str) -> JoinedRead | None:
        """``rows``' read, for running again with other values of ``params``; None where its
        compiled parameters are not ``params`` (in that order, each distinct, so that each
        keeps its place) or it selects other than its models' columns (``values()``, an
        annotation)."""
        laid_out = _laid_out(rows, params, using=using)
        if laid_out is None:
            return None
        compiler, sql = laid_out
        if compiler.annotation_col_map:  # values(), or an annotation: not only model columns
            return None
        select = compiler.select
        columns = [column for column, _, _ in select]
        main = compiler.klass_info["select_fields"]
        return cls(
            sql=sql,
            model=rows.model,
            converters=compiler.get_converters(columns),
            fields=(main[0], main[-1] + 1),
            attnames=[column.target.attname for column in columns[main[0] : main[-1] + 1]],
            populators=get_related_populators(compiler.klass_info, select, using),
        )

    def first(self, params: list[object], *, using: str) -> Model | None:
        """The first row read with ``params``, as its model's instance holding the joined
        instances; None when it reads none."""
        connection = connections[using]
        with connection.cursor() as cursor:
            cursor.execute(self.sql, params)
            row = cursor.fetchone()
        return None if row is None else self.instance(row, using=using)

    def instance(self, row: Sequence[Any], *, using: str) -> Model:
        """``row``, one of this query's rows, as its model's instance holding the joined
        instances."""
        connection = connections[using]
        if self.converters:
            # as the compiler applies them, with this thread's connection
            row = list(row)
            for position, (converters, expression) in self.converters.items():
                for convert in converters:
                    row[position] = convert(row[position], expression, connection)
        start, end = self.fields
        instance = self.model.from_db(using, self.attnames, row[start:end])
        for populator in self.populators:
            populator.populate(row, instance)
        return instance

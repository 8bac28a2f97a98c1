"""GraphStore over Neo4j 5.26 (the services deployment), with the official async driver.

The projection an operator sees in Neo4j Browser::

    (:Entity:MemoryUnit {id, user_id, kind, label, title, ts, salience, category, tags, source_agent_id,
                         valid_from, valid_to})
    (:Entity:Concept {id, user_id, kind, label, name, salience, category, valid_from, valid_to})
    (:Entity:DerivedArtifact {id, user_id, kind, label, title, ts, salience, category, valid_from, valid_to})
    (:MemoryUnit)-[:MENTIONS]->(:Concept)        (:Concept)-[:RELATED_TO]->(:Concept)
    (:DerivedArtifact)-[:DERIVED_FROM]->(:MemoryUnit|Concept)
    (:MemoryUnit)-[:FOLLOWS]->(:MemoryUnit)
    (:MemoryUnit|DerivedArtifact)-[:SUPERSEDES]->(:MemoryUnit|DerivedArtifact)     successor -> the fact it replaces
    every relationship: {user_id, weight, relation_type, valid_from, valid_to, sid, tid, nw, sts, tts}

``ts`` is epoch seconds (float), as on the ports. ``valid_from``/``valid_to`` are the node's or the
relationship's own validity (event time, epoch seconds; ``valid_from`` included, ``valid_to``
excluded; absent = open): a memory unit's or artifact's ``valid_from`` is its ``ts`` unless its
record says otherwise (``graph_schema/005_valid_from_backfill.cypher`` sets it on nodes written
before HRT wrote it). ``SUPERSEDES`` is never walked by expansion; with ``valid_at`` a relationship
whose interval does not hold at it is not walked either, and does not use up the fan-out (it is
filtered inside the reads, the hub's index reads included, before the cut; a candidate's mentions
and newest mention are no walk and are read whatever ``valid_at``, as in the embedded adapter), and
:meth:`Neo4jGraphStore.neighbors` leaves out a neighbour whose own interval or whose
relationship's does not hold. Ids are unique per user across kinds, so the
``:Entity(user_id, id)`` uniqueness constraint (``graph_schema/``) keys every node and serves every
lookup. Every query is parameterised and matches ``user_id`` itself; the only text that varies is
schema tokens taken from closed enums (relationship type, direction) and the number of levels of
an expansion, never a value.

Expansion is the best-path walk of :func:`hrt.stores.graph_walk.walk`, the walk the embedded
adapter runs, capped per kind at the source: only the nodes the walk expands (each hop's frontier,
which ``max_per_kind`` bounds at seeds + 3 x ``max_per_kind`` nodes at depth 3) have their links
read, each node's first ``fanout_per_node`` visible links in the shared visit order. It runs in one
of two places, with identical results (contract tests hold them to each other and to the embedded
adapter), and :func:`~hrt.stores.graph_walk.candidates` makes the candidates from either:

- inside Neo4j, in HRT's procedure ``hrt.expand`` (``neo4j-plugin/``, a jar in Neo4j's
  ``plugins/`` folder): one call, which walks through Neo4j's kernel cursors instead of Cypher's
  row-at-a-time runtime and returns the walk's result with the rows of the nodes reached (their
  attributes, a memory unit's mentions, a concept's newest mention);
- in Python over Cypher reads, hop by hop: one query (``_HOP``) per hop fetches the links of the
  frontier the walk asks for next, the walk runs again over everything fetched, and one last
  query (``_ROWS``) reads the rows of the nodes reached.

Hubs are cut inside Neo4j, not after reading them: every relationship carries the keys of the
visit order as seen from each end (``sid``/``tid`` ids, ``nw`` = -weight, ``sts``/``tts`` = -ts of
its source/target, no timestamp counting as 0; written with the edge, refreshed when a node's ``ts``
changes), and composite range indexes over them (``graph_schema/003_link_order.cypher``) hand a
node's links of one type and direction over in visit order. Expansion reads, per hub (a node with
more than :data:`SPARSE_DEGREE` relationships), the first ``fanout_per_node`` visible links of
each of the 8 (type, direction) pairs from those indexes and keeps the first ``fanout_per_node``
of their union, so a concept with 6,000 mentions costs what one with 10 does (any other node has
its few relationships walked and ordered, which is cheaper than 8 index reads); a concept's
newest mention is the first visible entry of ``mentions_newest``, and
:meth:`Neo4jGraphStore.neighbors` along incoming ``MENTIONS`` reads only up to its limit (and the
ties at it) the same way. The keys are derived data: :meth:`Neo4jGraphStore.apply_schema` fills
them in once for relationships written before they existed (``004_link_keys_backfill.cypher``).

``expansion="auto"`` (``HRT_NEO4J_EXPANSION``) uses ``hrt.expand`` when Neo4j has it in the version
this adapter expects (:data:`PLUGIN_VERSION`), else the Cypher reads (also from the first call that
finds it gone, after a restart of Neo4j without it); ``"procedure"`` requires it, ``"cypher"``
never uses it.

Driver errors are translated at this edge: connection loss and unavailable databases become
:class:`~hrt.errors.StoreUnavailable`, any other driver or server error :class:`~hrt.errors.StoreError`.

The Cypher text lives in :mod:`~hrt.stores.neo4j.queries` (``_HOP``, ``_ROWS`` and the others),
the records' rows in :mod:`~hrt.stores.neo4j.rows`, the schema files' reading in
:mod:`~hrt.stores.neo4j.schema`; this module holds :class:`Neo4jGraphStore`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hrt.errors import InvalidInput, StoreError, StoreUnavailable
from hrt.records import KIND_OF, EdgeType, Kind
from hrt.stores.base import WARM_UP_USER, ExpansionCaps, GraphCandidate, GraphEdge, GraphNode
from hrt.stores.graph_walk import WalkView, walk
from hrt.stores.neo4j.queries import (
    _ALL_NODES,
    _DELETE_EDGES,
    _DELETE_NODES,
    _DELETE_USER,
    _EDGES,
    _HOP_QUERY,
    _IDS,
    _NEIGHBOR_QUERIES,
    _PLUGIN_VERSION_QUERY,
    _PROCEDURE_QUERY,
    _ROWS_QUERY,
    _UPSERT_EDGES,
    _UPSERT_NODES,
    _float_or_none,
    _hop_params,
    _min_key,
)
from hrt.stores.neo4j.rows import _EDGE_OF, _candidates, _edge_row, _node, _node_row
from hrt.stores.neo4j.schema import _IN_TRANSACTIONS, bundled_schema_dir, schema_statements
from neo4j import READ_ACCESS, AsyncDriver, AsyncGraphDatabase, Auth, EagerResult, Query, RoutingControl
from neo4j.exceptions import (
    ConnectionPoolError,
    DatabaseUnavailable,
    DriverError,
    Neo4jError,
    ServiceUnavailable,
    SessionExpired,
)

log = logging.getLogger(__name__)

MAX_DEPTH = 3
# Expansion reads the links of a node with at most this many relationships by walking them, a
# hub's from the link order indexes (the 8 index reads per node cost more than walking the few
# relationships most nodes have)
SPARSE_DEGREE = 64
# The version of hrt.expand (neo4j-plugin/, Expansion.VERSION) whose output this adapter reads
PLUGIN_VERSION = "3"
EXPANSION_MODES = ("auto", "procedure", "cypher")
# One size per plan-cache bucket of Neo4j that a retrieval's seeds or shown ids fall in (user ids
# need none: see _user_as_list)
WARM_UP_LIST_SIZES = (1, 10, 100)


@contextmanager
def translate_errors(action: str) -> Iterator[None]:
    """Map driver exceptions raised in the block to HRT's error tree."""
    try:
        yield
    except (ServiceUnavailable, SessionExpired, ConnectionPoolError, DatabaseUnavailable) as exc:
        raise StoreUnavailable(f"Neo4j is unavailable ({action}): {exc}", store="Neo4j") from exc
    except Neo4jError as exc:
        raise StoreError(f"Neo4j failed ({action}): {exc.code}: {exc.message}", store="Neo4j") from exc
    except DriverError as exc:
        raise StoreError(f"Neo4j driver failed ({action}): {exc}", store="Neo4j") from exc
    except OSError as exc:
        raise StoreUnavailable(f"Neo4j is unreachable ({action}): {exc}", store="Neo4j") from exc


def _error_code(error: StoreError, code: str, message: str = "") -> bool:
    """Whether a translated error is Neo4j's error ``code`` (with ``message`` in its text)."""
    cause = error.__cause__
    return isinstance(cause, Neo4jError) and cause.code == code and message in (cause.message or "")


def _fetched_view(
    adjacency: Mapping[str, list[tuple[str, EdgeType, float, bool]]],
    attrs: Mapping[str, Sequence[Any]],
    not_after: float | None,
    missing: set[str],
) -> WalkView[str]:
    """The walk's view of what the Cypher expansion has fetched: the links and rows read so far;
    a node whose links the walk asks for but that are not fetched yet is added to ``missing`` (the
    next hop's frontier)."""
    kind_of = KIND_OF

    def links(ident: str) -> list[tuple[str, EdgeType, float, bool]]:
        found = adjacency.get(ident)
        if found is None:
            missing.add(ident)
            return []
        return found

    def shown(ident: str) -> bool:
        row = attrs.get(ident)
        return row is not None and (not_after is None or row[3] is None or row[3] <= not_after)

    return WalkView(
        links=links,
        visible=shown,
        kind=lambda ident: kind_of.get(attrs[ident][1]) or Kind(attrs[ident][1]),
        order=lambda ident: ident,
    )


class Neo4jGraphStore:
    """The GraphStore port over Neo4j. One instance per process; it owns a pooled async driver
    unless one is injected (then the caller closes it)."""

    def __init__(
        self,
        uri: str | None = None,
        *,
        database: str = "neo4j",
        auth: tuple[str, str] | Auth | None = None,
        driver: AsyncDriver | None = None,
        max_connection_pool_size: int = 50,
        connection_timeout: float = 5.0,
        connection_acquisition_timeout: float = 10.0,
        max_transaction_retry_time: float = 5.0,
        query_timeout: float | None = 30.0,
        sparse_degree: int = SPARSE_DEGREE,
        expansion: str = "auto",
    ) -> None:
        """``sparse_degree``: expansion walks the relationships of a node with at most this many,
        and reads a node with more from the link order indexes (both give the same links).
        ``expansion``: where the neighbourhood comes from (module docstring): ``auto``,
        ``procedure`` or ``cypher``."""
        if expansion not in EXPANSION_MODES:
            raise ValueError(f"expansion must be one of {', '.join(EXPANSION_MODES)}, got {expansion!r}")
        if (uri is None) == (driver is None):
            raise ValueError("give either a Neo4j uri or a driver")
        if driver is None:
            assert uri is not None
            driver = AsyncGraphDatabase.driver(
                uri,
                auth=auth,
                max_connection_pool_size=max_connection_pool_size,
                connection_timeout=connection_timeout,
                connection_acquisition_timeout=connection_acquisition_timeout,
                max_transaction_retry_time=max_transaction_retry_time,
                # HRT reads no notification; on an empty database each query would log a warning
                # per property key it names
                notifications_min_severity="OFF",
            )
            self._owns_driver = True
        else:
            self._owns_driver = False
        self._driver = driver
        self._database = database
        self._timeout = query_timeout
        self._sparse_degree = sparse_degree
        self._expansion = expansion
        self._procedure: bool | None = False if expansion == "cypher" else None  # None: not asked yet

    async def open(self, *, keep_trying: bool = False) -> None:
        """Nothing to do: the driver connects lazily, so a Neo4j that is down at start only fails
        the calls that need it (as StoreUnavailable). Use :meth:`ping` to check readiness."""

    async def close(self) -> None:
        if self._owns_driver:
            await self._driver.close()

    async def _run(
        self, action: str, text: str, params: dict[str, Any], *, read: bool = False, untimed: bool = False
    ) -> EagerResult:
        """One managed transaction (retried on transient errors), under the query timeout unless
        ``untimed``."""
        with translate_errors(action):
            result: EagerResult = await self._driver.execute_query(
                Query(text, timeout=None if untimed else self._timeout),
                params,
                routing_=RoutingControl.READ if read else RoutingControl.WRITE,
                database_=self._database,
            )
        return result

    # --- operations ------------------------------------------------------------------------

    async def ping(self) -> None:
        """Raise StoreUnavailable unless the database answers a query: one auto-commit query,
        never retried (a managed transaction retries an unreachable server for seconds; a
        readiness check and a circuit's probe want the answer now)."""
        with translate_errors("ping"):
            async with self._driver.session(database=self._database, default_access_mode=READ_ACCESS) as session:
                await (await session.run(Query("RETURN 1 AS one", timeout=self._timeout))).consume()

    async def apply_schema(self, folder: Path | None = None) -> None:
        """Run the ``graph_schema/`` statements in file order (each is idempotent: ``IF NOT
        EXISTS``, or a one-off backfill guarded by a marker node, run in an auto-commit
        transaction so that it commits in batches), then wait until every index is online (the
        reads name their indexes in hints)."""
        statements = schema_statements(folder or bundled_schema_dir())
        for statement in statements:
            if _IN_TRANSACTIONS.search(statement):
                with translate_errors("apply schema"):
                    async with self._driver.session(database=self._database) as session:
                        await (await session.run(Query(statement, timeout=None))).consume()
            else:  # a managed transaction: retried while a starting server is not ready yet
                await self._run("apply schema", statement, {})
        await self._run("await indexes", "CALL db.awaitIndexes($seconds)", {"seconds": 3600}, untimed=True)

    async def ids(self, user_id: str) -> dict[str, str]:
        """Every node of one user, id -> kind (for drift checks against the record store)."""
        result = await self._run("list ids", _IDS, {"user_id": user_id}, read=True)
        return {rec["id"]: rec["kind"] for rec in result.records}

    async def nodes(self, user_id: str) -> dict[str, GraphNode]:
        """Every node of one user as projected (``hrt doctor`` compares them with the records)."""
        result = await self._run("list nodes", _ALL_NODES, {"user_id": user_id}, read=True)
        return {rec["row"][0]: _node(rec["row"]) for rec in result.records}

    async def edges(self, user_id: str) -> list[GraphEdge]:
        """Every edge of one user as projected, in (source, target, type) order."""
        result = await self._run("list edges", _EDGES, {"user_id": user_id}, read=True)
        return [
            GraphEdge(
                r["source"],
                r["target"],
                EdgeType(r["type"]),
                r["weight"],
                r["relation_type"],
                r["valid_from"],
                r["valid_to"],
            )
            for r in result.records
        ]

    async def delete_user(self, user_id: str) -> None:
        """Remove every node and edge of one user, in batches of 1000 nodes."""
        with translate_errors("delete user"):
            async with self._driver.session(database=self._database) as session:
                result = await session.run(Query(_DELETE_USER, timeout=self._timeout), {"user_id": user_id})
                summary = await result.consume()
        log.info("deleted %d graph nodes of user %s", summary.counters.nodes_deleted, user_id)

    # --- writes ------------------------------------------------------------------------------

    async def upsert_nodes(self, user_id: str, nodes: Sequence[GraphNode]) -> None:
        if nodes:
            await self._run("upsert nodes", _UPSERT_NODES, {"user_id": user_id, "rows": [_node_row(n) for n in nodes]})

    async def delete_nodes(self, user_id: str, ids: Sequence[str]) -> None:
        if ids:
            await self._run("delete nodes", _DELETE_NODES, {"user_id": user_id, "ids": list(ids)})

    async def upsert_edges(self, user_id: str, edges: Sequence[GraphEdge]) -> None:
        if not edges:
            return
        rows = [_edge_row(e) for e in edges]
        result = await self._run("upsert edges", _UPSERT_EDGES, {"user_id": user_id, "rows": rows})
        written = result.records[0]["written"] if result.records else 0
        if written < len(rows):
            log.warning(
                "skipped %d of %d edges of user %s whose endpoints are not in the graph",
                len(rows) - written,
                len(rows),
                user_id,
            )

    async def delete_edges(self, user_id: str, edges: Sequence[GraphEdge]) -> None:
        if edges:
            rows = [_edge_row(e) for e in edges]
            await self._run("delete edges", _DELETE_EDGES, {"user_id": user_id, "rows": rows})

    # --- reads -------------------------------------------------------------------------------

    async def expand(
        self,
        user_id: str,
        seeds: Mapping[str, float],
        caps: ExpansionCaps,
        not_after: float | None = None,
        valid_at: float | None = None,
    ) -> list[GraphCandidate]:
        if not 0 <= caps.depth <= MAX_DEPTH:
            raise InvalidInput(f"depth must be 0 to {MAX_DEPTH}, got {caps.depth}", field="depth")
        if not seeds:
            return []
        if await self.uses_procedure():
            try:
                return await self._expand_by_procedure(user_id, seeds, caps, not_after, valid_at)
            except StoreError as exc:
                gone = _error_code(exc, "Neo.ClientError.Procedure.ProcedureNotFound")
                if self._expansion == "procedure" or not gone:
                    raise
                # Neo4j restarted without the plugin: the Cypher reads give the same answer
                log.warning("Neo4j no longer has hrt.expand: expansion runs the Cypher query (slower)")
                self._procedure = False
        return await self._expand_by_hops(user_id, seeds, caps, not_after, valid_at)

    async def _expand_by_procedure(
        self,
        user_id: str,
        seeds: Mapping[str, float],
        caps: ExpansionCaps,
        not_after: float | None,
        valid_at: float | None,
    ) -> list[GraphCandidate]:
        """Expansion in one call of ``hrt.expand``, which runs :func:`graph_walk.walk` inside Neo4j
        (capped per kind there, so it reads only the links of the nodes the walk expands) and
        returns its result with the rows of the nodes reached; the candidates are made here by
        :func:`graph_walk.candidates`, as on every other path."""
        ids = sorted(seeds)
        params = {
            "user": [user_id],
            "seeds": ids,
            "scores": [float(seeds[ident]) for ident in ids],
            "depth": caps.depth,
            "fanout": max(caps.fanout_per_node, 0),
            "max_per_kind": caps.max_per_kind,
            "hop_decay": float(caps.hop_decay),
            "sparse": self._sparse_degree,
            "not_after": _float_or_none(not_after),
            "valid_at": _float_or_none(valid_at),
        }
        record = (await self._run("expand", _PROCEDURE_QUERY, params, read=True)).records[0]
        rows: dict[str, Sequence[Any]] = {row[0]: row for row in record["nodes"]}
        edge_of = _EDGE_OF
        best = {
            ident: (score, hops, seed, tuple((edge_of[edge], other, fwd) for edge, other, fwd in path), first)
            for ident, score, hops, seed, path, first in record["walk"]
        }
        return _candidates(best, rows)

    async def _expand_by_hops(
        self,
        user_id: str,
        seeds: Mapping[str, float],
        caps: ExpansionCaps,
        not_after: float | None,
        valid_at: float | None,
    ) -> list[GraphCandidate]:
        """Expansion through Cypher, capped per kind at the source: the walk runs over what has
        been fetched, and the nodes whose links it asked for but that are not fetched yet (the next
        hop's frontier, which the per-kind cap bounds at seeds + 3 x max_per_kind nodes) are
        fetched in one query (_HOP) and the walk runs again, until it asks for nothing new; then
        one more query (_ROWS) reads the result's rows: at most depth + 2 queries, where fetching
        every node of every level read up to millions of links for 20 seeds at depth 3. The walk
        is deterministic and a hop reads only links of nodes reached before it, so the last run is
        the walk over the whole graph."""
        # only the parameters each query reads: Neo4j's plan cache is keyed on them (warm)
        params = _hop_params(user_id, caps.fanout_per_node, self._sparse_degree, not_after, valid_at)
        attrs: dict[str, Sequence[Any]] = {}
        adjacency: dict[str, list[tuple[str, EdgeType, float, bool]]] = {}
        edge_of = _EDGE_OF
        todo = sorted(seeds)
        best: dict[str, Any] = {}
        while todo:
            result = await self._run("expand", _HOP_QUERY, {**params, "todo": todo}, read=True)
            for rec in result.records:
                node = rec["node"]
                attrs[node[0]] = node
                adjacency[node[0]] = [(other, edge_of[edge], weight, fwd) for other, edge, weight, fwd in rec["links"]]
                for row in rec["reached"]:
                    attrs.setdefault(row[0], row)
            for ident in todo:
                adjacency.setdefault(ident, [])  # not in the store, or not visible
            missing: set[str] = set()
            best = walk(_fetched_view(adjacency, attrs, not_after, missing), list(seeds.items()), caps)
            todo = sorted(missing)
        if not best:
            return []
        rows_params = {"user": [user_id], "not_after": not_after, "min_key": params["min_key"], "ids": sorted(best)}
        result = await self._run("expand", _ROWS_QUERY, rows_params, read=True)
        rows = {row[0]: row for row in result.records[0]["nodes"]}
        # a node deleted since its hop was read is left out, as if read after the delete
        return _candidates({ident: found for ident, found in best.items() if ident in rows}, rows)

    @property
    def expansion_path(self) -> str:
        """Where expansion reads from: ``procedure``, ``cypher``, or ``unknown`` before Neo4j was
        asked (``hrt serve``'s warm-up asks before ``/readyz`` says ready)."""
        return "unknown" if self._procedure is None else "procedure" if self._procedure else "cypher"

    async def uses_procedure(self) -> bool:
        """Whether expansion runs ``hrt.expand``: asked of Neo4j once (``hrt.version()``) in the
        ``auto`` mode. A Neo4j that is down raises (and is asked again next time); one without the
        procedure, or with another version of it, gets the Cypher reads. The ``procedure`` mode
        raises StoreError when the procedure is missing or of another version."""
        if self._procedure is not None:
            return self._procedure
        problem: str | None
        try:
            result = await self._run("check hrt.expand", _PLUGIN_VERSION_QUERY, {}, read=True)
        except StoreError as exc:
            if not _error_code(exc, "Neo.ClientError.Statement.SyntaxError", "Unknown function"):
                raise  # Neo4j down, a wrong database, ...: not an answer about the procedure
            problem = "not installed"
        else:
            version = result.records[0]["version"]
            problem = None if version == PLUGIN_VERSION else f"version {version!r}, this HRT reads {PLUGIN_VERSION!r}"
        if problem is not None and self._expansion == "procedure":
            raise StoreError(f"HRT_NEO4J_EXPANSION=procedure but Neo4j's hrt.expand is {problem}", store="Neo4j")
        if problem is not None:
            log.warning("Neo4j's hrt.expand is %s: expansion runs the Cypher query (slower)", problem)
        self._procedure = problem is None
        return self._procedure

    async def warm(self) -> None:
        """Send every read query retrieval uses, for a user id no record can carry (it fails the id
        pattern), so Neo4j plans them now and not on a user's first request (expansion took 1 to
        3.7 s planning after a Neo4j start). Reads nothing: no node has that user id.

        Neo4j keys its plan cache on the query text and on the size bucket of each string and list
        parameter (1, 2-10, 11-100, 101-1000: a plan's cardinality estimates depend on it), so 3
        and 30 seeds get different plans. Each query is sent for lists of 1, 10 and 100 ids:
        assembly's neighbour reads (a memory unit's concepts, a concept's memory units) and the
        supersession reads (a fact's successors, what it replaces), then expansion's (for 1,000
        ids too), which are the same at every depth; the user id is a one-element list in every
        read, so its length makes no other plan (:func:`_user_as_list`). A null and a number share
        a plan, so neither ``not_after`` nor ``valid_at`` needs sending both ways."""
        for size in WARM_UP_LIST_SIZES:
            ids = [f"{WARM_UP_USER}{i}" for i in range(size)]
            for edge in (EdgeType.MENTIONS, EdgeType.SUPERSEDES):
                for outgoing in (True, False):
                    await self.neighbors(WARM_UP_USER, ids, edge, outgoing, 1, not_after=0.0, valid_at=0.0)
        # expansion's queries (the same at any depth): the procedure's call for up to a thousand
        # seeds, or the Cypher expansion's two queries for frontiers and results of up to a
        # thousand ids (the per-kind cap lets a frontier pass a hundred)
        for size in (*WARM_UP_LIST_SIZES, 1000):
            seeds = {f"{WARM_UP_USER}{i}": 1.0 for i in range(size)}
            await self.expand(WARM_UP_USER, seeds, ExpansionCaps(1, 8, 8, 0.5), not_after=0.0)
        if await self.uses_procedure():
            return
        for size in (*WARM_UP_LIST_SIZES, 1000):
            ids = [f"{WARM_UP_USER}{i}" for i in range(size)]
            params = _hop_params(WARM_UP_USER, 8, self._sparse_degree, 0.0)
            await self._run("warm up", _HOP_QUERY, {**params, "todo": ids}, read=True)
            rows_params = {"user": [WARM_UP_USER], "not_after": 0.0, "min_key": params["min_key"], "ids": ids}
            await self._run("warm up", _ROWS_QUERY, rows_params, read=True)

    async def neighbors(
        self,
        user_id: str,
        ids: Sequence[str],
        edge: EdgeType,
        outgoing: bool,
        limit: int,
        not_after: float | None = None,
        valid_at: float | None = None,
    ) -> dict[str, list[GraphNode]]:
        if not ids:
            return {}
        query = _NEIGHBOR_QUERIES[(EdgeType(edge), bool(outgoing))]
        params = {
            "user": [user_id],
            "ids": list(dict.fromkeys(ids)),
            "limit": max(limit, 0),
            "not_after": not_after,
            "min_key": _min_key(not_after),
            "valid_at": _float_or_none(valid_at),
        }
        result = await self._run("neighbors", query, params, read=True)
        found = {rec["ident"]: [_node(row) for row in rec["found"]] for rec in result.records}
        return {ident: found.get(ident, []) for ident in ids}

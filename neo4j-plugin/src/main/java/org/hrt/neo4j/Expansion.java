package org.hrt.neo4j;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashSet;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.stream.Stream;
import org.neo4j.exceptions.KernelException;
import org.neo4j.graphdb.Direction;
import org.neo4j.graphdb.Transaction;
import org.neo4j.internal.kernel.api.IndexQueryConstraints;
import org.neo4j.internal.kernel.api.PropertyIndexQuery;
import org.neo4j.internal.kernel.api.RelationshipValueIndexCursor;
import org.neo4j.internal.kernel.api.TokenRead;
import org.neo4j.internal.schema.IndexOrder;
import org.neo4j.procedure.Context;
import org.neo4j.procedure.Description;
import org.neo4j.procedure.Mode;
import org.neo4j.procedure.Name;
import org.neo4j.procedure.Procedure;
import org.neo4j.procedure.UserFunction;
import org.neo4j.storageengine.api.PropertySelection;
import org.neo4j.storageengine.api.RelationshipSelection;
import org.neo4j.values.storable.NumberValue;
import org.neo4j.values.storable.TextValue;
import org.neo4j.values.storable.Value;
import org.neo4j.values.storable.Values;

/**
 * {@code hrt.expand}: the neighbourhood that HRT's best-path walk reads, fetched inside Neo4j.
 *
 * <p>It returns exactly what the expansion Cypher query of {@code hrt/stores/neo4j_graph.py}
 * returns (a contract test compares the two, and the Python adapter runs the same walk over
 * either): {@code adjacency}, one {@code [id, links]} per node expanded (the seeds, then each
 * level's new nodes up to level {@code depth - 1}), where {@code links} are the node's first
 * {@code fanout} visible links in the walk's visit order as {@code [other id, type, weight,
 * forward]}; and {@code nodes}, one row per node fetched: {@code [id, kind, label, ts, salience,
 * category, tags, source_agent_id, valid_from, valid_to, mentions, newest mention ts]}.
 *
 * <p>A link is visible when its other end is not timestamped after {@code notAfter} and, given a
 * {@code validAt}, its relationship's own interval ({@code valid_from} included, {@code valid_to}
 * excluded, absent = open) holds at it. {@code SUPERSEDES} is never walked (not one of
 * {@link GraphReader#TYPE_NAMES}). A link that is not visible does not use up the fan-out: a hub's
 * index reads skip it and read on.
 *
 * <p>Visit order (hrt/stores/graph_walk.py): strongest edge first ({@code nw} = -weight), then
 * newest other end ({@code sts}/{@code tts} = -ts of the source/target, 0 without one), then the
 * other end's id, then the edge type, then the edge's source and target ids, forward before
 * backward. Every relationship carries those keys ({@code graph_schema/003_link_order.cypher}).
 *
 * <p>Why a procedure: Community Neo4j runs Cypher row at a time (the pipelined runtime is
 * Enterprise only), and the query spent most of its time there. Here everything is read through
 * the kernel's cursors: a node with few relationships has them walked and sorted; a hub's come
 * from its 8 (type, direction) link order indexes, merged in order and cut after {@code fanout}
 * entries, so a concept with thousands of mentions costs what one with ten does. Every read
 * matches {@code user_id}. The kernel API is Neo4j's internal one: the plugin is built for one
 * Neo4j version (pom.xml), and the adapter uses it only when {@code hrt.version()} matches.
 */
public final class Expansion {
    /** Bumped whenever the output changes; the Python adapter uses the procedure only on a match. */
    public static final String VERSION = "2";

    private static final String MEMORY_UNIT = "memory_unit";
    private static final String CONCEPT = "concept";
    private static final int MAX_DEPTH = 3;

    @Context
    public Transaction tx;

    /** The one output row of {@code hrt.expand}. */
    public static final class Neighbourhood {
        public List<Object> adjacency;
        public List<Object> nodes;

        Neighbourhood(List<Object> adjacency, List<Object> nodes) {
            this.adjacency = adjacency;
            this.nodes = nodes;
        }
    }

    @UserFunction(name = "hrt.version")
    @Description("The version of HRT's Neo4j procedures (hrt.expand).")
    public String version() {
        return VERSION;
    }

    @Procedure(name = "hrt.expand", mode = Mode.READ)
    @Description("hrt.expand(user, seeds, depth, fanout, sparse, notAfter, validAt): the neighbourhood HRT's walk"
            + " reads, per level each node's first `fanout` visible links (of relationships valid at `validAt`)"
            + " in visit order, and every node's attributes.")
    public Stream<Neighbourhood> expand(
            @Name("user") String user,
            @Name("seeds") List<String> seeds,
            @Name("depth") long depth,
            @Name("fanout") long fanout,
            @Name("sparse") long sparse,
            @Name("notAfter") Double notAfter,
            @Name("validAt") Double validAt)
            throws KernelException {
        if (seeds == null) {
            throw new IllegalArgumentException("hrt.expand: seeds are required");
        }
        if (depth < 0 || depth > MAX_DEPTH) {
            throw new IllegalArgumentException("hrt.expand: depth must be 0 to " + MAX_DEPTH + ", got " + depth);
        }
        try (Walker walker = new Walker(tx, user, (int) Math.min(Math.max(fanout, 0), Integer.MAX_VALUE), sparse,
                notAfter, validAt)) {
            return Stream.of(walker.run(seeds, (int) depth));
        }
    }

    /** One link of a node with its visit order keys; {@code relationship} and {@code otherNode} are
     * store references. */
    private record Link(double nw, double key, String other, int type, String sid, String tid, boolean forward,
                        long relationship, long otherNode) {}

    /** The visit order (class comment). Type ids are compared by name. */
    private static Comparator<Link> visitOrder(String[] typeNames) {
        return (a, b) -> {
            int c = GraphReader.cmp(a.nw, b.nw);
            if (c == 0) c = GraphReader.cmp(a.key, b.key);
            if (c == 0) c = a.other.compareTo(b.other);
            if (c == 0) c = typeNames[a.type].compareTo(typeNames[b.type]);
            if (c == 0) c = a.sid.compareTo(b.sid);
            if (c == 0) c = a.tid.compareTo(b.tid);
            if (c == 0) c = Boolean.compare(b.forward, a.forward);
            return c;
        };
    }

    private static final class Walker extends GraphReader {
        private final int fanout;
        private final long sparse;
        private final int[] types; // the token ids of TYPE_NAMES that exist
        private final int mentions;
        private final Comparator<Link> order;
        private final PropertySelection linkKeys, mentionKeys;

        Walker(Transaction tx, String user, int fanout, long sparse, Double notAfter, Double validAt) {
            super(tx, user, notAfter, validAt);
            this.fanout = fanout;
            this.sparse = sparse;
            TokenRead tokens = ktx.tokenRead();
            types = Arrays.stream(TYPE_NAMES).mapToInt(tokens::relationshipType).filter(t -> !missing(t)).toArray();
            mentions = tokens.relationshipType("MENTIONS");
            order = visitOrder(typeNames);
            linkKeys = selection(userKey, nwKey, stsKey, ttsKey, sidKey, tidKey, validFromKey, validToKey);
            mentionKeys = selection(userKey, nwKey, ttsKey, tidKey);
        }

        Neighbourhood run(List<String> seeds, int depth) throws KernelException {
            LinkedHashSet<Long> fetched = new LinkedHashSet<>();
            List<Long> level = new ArrayList<>();
            for (String seed : seeds) {
                long ref = find(seed);
                if (ref >= 0 && visible(tsOf(ref)) && fetched.add(ref)) {
                    level.add(ref);
                }
            }
            List<Object> adjacency = new ArrayList<>();
            Set<Long> expanded = new HashSet<>();
            for (int hop = 1; hop <= depth && !level.isEmpty(); hop++) {
                LinkedHashSet<Long> next = new LinkedHashSet<>();
                for (long ref : level) {
                    if (!expanded.add(ref)) {
                        continue; // reached again at a deeper level: the same links as before
                    }
                    String id = idOf(ref);
                    List<Link> links = links(ref, id);
                    List<Object> rows = new ArrayList<>(links.size());
                    for (Link link : links) {
                        rows.add(Arrays.asList(link.other, typeNames[link.type], weight(link.relationship),
                                link.forward));
                        next.add(link.otherNode);
                    }
                    adjacency.add(Arrays.asList(id, rows));
                }
                level = new ArrayList<>(next);
                fetched.addAll(next);
            }
            List<Object> nodes = new ArrayList<>(fetched.size());
            for (long ref : fetched) {
                nodes.add(row(ref));
            }
            return new Neighbourhood(adjacency, nodes);
        }

        /** [id, kind, label, ts, salience, category, tags, source_agent_id, valid_from, valid_to, mentions,
         * newest mention ts] */
        private List<Object> row(long ref) throws KernelException {
            Object[] values = rowValues(ref);
            Object kind = values[1];
            List<Object> mentioned = MEMORY_UNIT.equals(kind) ? mentionsOf(ref) : List.of();
            Double newest = CONCEPT.equals(kind) && values[0] instanceof String id ? newestMention(id) : null;
            List<Object> row = new ArrayList<>(values.length + 2);
            row.addAll(Arrays.asList(values));
            row.add(mentioned);
            row.add(newest);
            return row;
        }

        /** A memory unit's mentioned concepts' ids (of its MENTIONS to :Entity nodes), by (nw, tts, tid). */
        private List<Object> mentionsOf(long ref) {
            if (missing(mentions) || !positioned(node, ref)) {
                return List.of();
            }
            List<Object[]> found = new ArrayList<>();
            node.relationships(relationships, RelationshipSelection.selection(mentions, Direction.OUTGOING));
            while (relationships.next()) {
                Value owner = Values.NO_VALUE, nw = Values.NO_VALUE, tts = Values.NO_VALUE, tid = Values.NO_VALUE;
                relationships.properties(properties, mentionKeys);
                while (properties.next()) {
                    int key = properties.propertyKey();
                    Value value = properties.propertyValue();
                    if (key == userKey) owner = value;
                    else if (key == nwKey) nw = value;
                    else if (key == ttsKey) tts = value;
                    else if (key == tidKey) tid = value;
                }
                if (!owner.equals(userValue)) {
                    continue;
                }
                long target = relationships.targetNodeReference();
                if (!positioned(other, target) || !other.hasLabel(entity)) {
                    continue;
                }
                found.add(new Object[] {orNull(nw), orNull(tts), orNull(tid)});
            }
            found.sort((a, b) -> {
                int c = nullsLast(a[0], b[0]);
                if (c == 0) c = nullsLast(a[1], b[1]);
                if (c == 0) c = nullsLast(a[2], b[2]);
                return c;
            });
            List<Object> ids = new ArrayList<>(found.size());
            for (Object[] f : found) {
                ids.add(f[2]);
            }
            return ids;
        }

        private static Object orNull(Value value) {
            return value == Values.NO_VALUE ? null : value.asObjectCopy();
        }

        @SuppressWarnings({"unchecked", "rawtypes"})
        private static int nullsLast(Object a, Object b) {
            if (a == null || b == null) {
                return a == null ? (b == null ? 0 : 1) : -1;
            }
            if (a instanceof Number x && b instanceof Number y) {
                return GraphReader.cmp(x.doubleValue(), y.doubleValue());
            }
            return ((Comparable) a).compareTo(b);
        }

        /** A concept's newest visible mentioning memory unit's ts: the first entry of mentions_newest
         * (user_id, tid, sts = -ts of the memory unit) from -notAfter on whose memory unit has a ts. */
        private Double newestMention(String id) throws KernelException {
            if (missing(userKey) || missing(tidKey) || missing(stsKey)) {
                return null;
            }
            try (RelationshipValueIndexCursor cursor = cursors.allocateRelationshipValueIndexCursor(context, memory)) {
                read.relationshipIndexSeek(ktx.queryContext(), session("mentions_newest"), cursor,
                        IndexQueryConstraints.constrained(IndexOrder.ASCENDING, false),
                        PropertyIndexQuery.exact(userKey, user),
                        PropertyIndexQuery.exact(tidKey, id),
                        PropertyIndexQuery.range(stsKey, minKey, true, null, false));
                while (cursor.next()) {
                    if (!cursor.readFromStore()) {
                        continue;
                    }
                    if (tsOf(cursor.sourceNodeReference()) instanceof NumberValue ts
                            && (notAfter == null || ts.doubleValue() <= notAfter)) {
                        return ts.doubleValue();
                    }
                }
            }
            return null;
        }

        // --- links ---------------------------------------------------------------------------

        /** The node's first {@code fanout} visible links in visit order. */
        private List<Link> links(long ref, String id) throws KernelException {
            if (types.length == 0 || !positioned(node, ref)) {
                return List.of(); // no relationship of HRT's types exists yet
            }
            if (node.degreeWithMax((int) Math.min(sparse + 1, Integer.MAX_VALUE), RelationshipSelection.ALL_RELATIONSHIPS)
                    > sparse) {
                return merged(id);
            }
            List<Link> all = new ArrayList<>();
            node.relationships(relationships, RelationshipSelection.selection(types, Direction.BOTH));
            while (relationships.next()) {
                walked(ref, all);
            }
            all.sort(order);
            return all.size() > fanout ? all.subList(0, fanout) : all;
        }

        /** The relationship under the traversal cursor as a link from node {@code ref}, if visible
         * (its other end as of notAfter, its interval at validAt); a self-loop gives both of its ends. */
        private void walked(long ref, List<Link> out) {
            long source = relationships.sourceNodeReference(), target = relationships.targetNodeReference();
            Value owner = Values.NO_VALUE, nw = Values.NO_VALUE, sts = Values.NO_VALUE, tts = Values.NO_VALUE;
            Value sid = Values.NO_VALUE, tid = Values.NO_VALUE, from = Values.NO_VALUE, to = Values.NO_VALUE;
            relationships.properties(properties, linkKeys);
            while (properties.next()) {
                int key = properties.propertyKey();
                Value value = properties.propertyValue();
                if (key == userKey) owner = value;
                else if (key == nwKey) nw = value;
                else if (key == stsKey) sts = value;
                else if (key == ttsKey) tts = value;
                else if (key == sidKey) sid = value;
                else if (key == tidKey) tid = value;
                else if (key == validFromKey) from = value;
                else if (key == validToKey) to = value;
            }
            if (!owner.equals(userValue) || !(nw instanceof NumberValue nwv)
                    || !(sid instanceof TextValue sidv) || !(tid instanceof TextValue tidv) || !holds(from, to)) {
                return;
            }
            long relationship = relationships.relationshipReference();
            int type = relationships.type();
            if (type >= typeNames.length || typeNames[type] == null) {
                return; // not one of HRT's types (the selection asked for them only)
            }
            if (source == ref && tts instanceof NumberValue key && visibleKey(key.doubleValue(), target)) {
                out.add(new Link(nwv.doubleValue(), key.doubleValue(), tidv.stringValue(), type, sidv.stringValue(),
                        tidv.stringValue(), true, relationship, target));
            }
            if (target == ref && sts instanceof NumberValue key && visibleKey(key.doubleValue(), source)) {
                out.add(new Link(nwv.doubleValue(), key.doubleValue(), sidv.stringValue(), type, sidv.stringValue(),
                        tidv.stringValue(), false, relationship, source));
            }
        }

        /** A hub's first {@code fanout} visible links: its (type, direction) link order indexes
         * (user_id, me, nw, key, other) each hand their entries over in index order, which is the
         * visit order within one (type, direction), so merging their heads yields the node's links
         * in visit order, and the merge stops after {@code fanout}: about {@code fanout} entries are
         * read, whatever the degree. */
        private List<Link> merged(String id) throws KernelException {
            List<Seek> seeks = new ArrayList<>(2 * types.length);
            List<Link> out = new ArrayList<>();
            try {
                for (int type : types) {
                    for (boolean forward : new boolean[] {true, false}) {
                        Seek seek = new Seek(id, type, forward);
                        seeks.add(seek);
                        seek.start();
                    }
                }
                while (out.size() < fanout) {
                    Seek first = null;
                    for (Seek seek : seeks) {
                        if (seek.head != null && (first == null || order.compare(seek.head, first.head) < 0)) {
                            first = seek;
                        }
                    }
                    if (first == null) {
                        break;
                    }
                    out.add(first.head);
                    first.advance();
                }
            } finally {
                for (Seek seek : seeks) {
                    seek.cursor.close();
                }
            }
            return out;
        }

        /** One (type, direction) link order index of a hub read in index order; {@code head} is its
         * next visible link (one whose interval does not hold at validAt is read past), null when it
         * has no more. */
        private final class Seek {
            final String id;
            final int type;
            final boolean forward;
            final RelationshipValueIndexCursor cursor;
            Link head;

            Seek(String id, int type, boolean forward) {
                this.id = id;
                this.type = type;
                this.forward = forward;
                this.cursor = cursors.allocateRelationshipValueIndexCursor(context, memory);
            }

            void start() throws KernelException {
                String index = "link_" + typeNames[type].toLowerCase(Locale.ROOT) + (forward ? "_out" : "_in");
                read.relationshipIndexSeek(ktx.queryContext(), session(index), cursor,
                        IndexQueryConstraints.constrained(IndexOrder.ASCENDING, true),
                        PropertyIndexQuery.exact(userKey, user),
                        PropertyIndexQuery.exact(forward ? sidKey : tidKey, id),
                        PropertyIndexQuery.exists(nwKey),
                        PropertyIndexQuery.exists(forward ? ttsKey : stsKey),
                        PropertyIndexQuery.exists(forward ? tidKey : sidKey));
                advance();
            }

            void advance() {
                head = null;
                while (cursor.next()) {
                    if (!(cursor.propertyValue(2) instanceof NumberValue nw)
                            || !(cursor.propertyValue(3) instanceof NumberValue k)
                            || !(cursor.propertyValue(4) instanceof TextValue o)
                            || !cursor.readFromStore()) {
                        continue;
                    }
                    double key = k.doubleValue();
                    long otherNode = forward ? cursor.targetNodeReference() : cursor.sourceNodeReference();
                    if (!visibleKey(key, otherNode)) {
                        continue; // the other end is after notAfter
                    }
                    if (!holds(cursor)) {
                        continue; // the relationship does not hold at validAt
                    }
                    String otherId = o.stringValue();
                    head = new Link(nw.doubleValue(), key, otherId, type, forward ? id : otherId,
                            forward ? otherId : id, forward, cursor.relationshipReference(), otherNode);
                    return;
                }
            }
        }

    }
}

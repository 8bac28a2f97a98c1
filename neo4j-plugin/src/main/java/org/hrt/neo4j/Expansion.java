package org.hrt.neo4j;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
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
 * {@code hrt.expand}: HRT's expansion, the best-path walk over one user's graph, run inside Neo4j
 * in one call.
 *
 * <p>The walk is {@code walk} of {@code hrt/stores/graph_walk.py}, step for step (a contract test
 * holds the two to identical results, float scores included): the seeds strongest first, then by
 * id; per hop, each node of the frontier (best score first, then id) offers its first
 * {@code fanout} visible links in visit order (below); a link to a node that is not visible does
 * not use up the fan-out; the score offered is {@code score * hopDecay * weight}, in that order, in
 * double precision (as Python computes it); a node already reached keeps its path unless offered
 * a strictly better score (ties keep the path found first), and keeps the hop it was first reached
 * at; a new node is admitted only while fewer than {@code maxPerKind} nodes of its kind are in (the
 * seeds count, but are never refused); the next hop's frontier is the nodes reached (new or
 * improved) in this one. Because the cap bounds each frontier, only the links of the nodes the
 * walk expands are read: at most seeds + 3 x {@code maxPerKind} nodes at depth 3, whatever the
 * graph holds beyond them.
 *
 * <p>Ids are ordered with {@link String#compareTo} (UTF-16 code units), which is Python's order of
 * {@code str} (code points) for every id HRT accepts: {@code valid_id} in {@code hrt/records.py}
 * allows ASCII letters, digits and {@code _ . : @ -} only. Ids outside that alphabet (which HRT
 * never writes) could order differently only if they held characters beyond U+FFFF.
 *
 * <p>It returns one row: {@code walk}, one {@code [id, score, hops, seed id, path, first hop]} per
 * node reached (seeds included: hops 0, an empty path), where {@code path} is the steps from the
 * seed as {@code [type, node id, forward]}; {@code nodes}, the row of each of those nodes,
 * {@code [id, kind, label, ts, salience, category, tags, source_agent_id, valid_from, valid_to,
 * mentions, newest mention ts]}; and {@code read}, the number of links the walk read (the bound
 * above, which tests check).
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
 * Enterprise only), and the expansion queries spent most of their time there; and the walk here
 * needs one round trip where the Python walk over Cypher reads needs one per hop. Everything is
 * read through the kernel's cursors: a node with few relationships has them walked and sorted; a
 * hub's come from its 8 (type, direction) link order indexes, merged in order and cut after
 * {@code fanout} entries, so a concept with thousands of mentions costs what one with ten does.
 * Every read matches {@code user_id}. The kernel API is Neo4j's internal one: the plugin is built
 * for one Neo4j version (pom.xml), and the adapter uses it only when {@code hrt.version()} matches.
 */
public final class Expansion {
    /** Bumped whenever the arguments or the output change; the Python adapter uses the procedure
     * only on a match. */
    public static final String VERSION = "3";

    private static final String MEMORY_UNIT = "memory_unit";
    private static final String CONCEPT = "concept";
    private static final int MAX_DEPTH = 3;

    @Context
    public Transaction tx;

    /** The one output row of {@code hrt.expand}. */
    public static final class Walked {
        public List<Object> walk;
        public List<Object> nodes;
        public long read;

        Walked(List<Object> walk, List<Object> nodes, long read) {
            this.walk = walk;
            this.nodes = nodes;
            this.read = read;
        }
    }

    @UserFunction(name = "hrt.version")
    @Description("The version of HRT's Neo4j procedures (hrt.expand).")
    public String version() {
        return VERSION;
    }

    @Procedure(name = "hrt.expand", mode = Mode.READ)
    @Description("hrt.expand(user, seeds, scores, depth, fanout, maxPerKind, hopDecay, sparse, notAfter, validAt):"
            + " HRT's best-path walk from the seeds (with their scores), per hop each frontier node's first"
            + " `fanout` visible links (of relationships valid at `validAt`) in visit order, at most"
            + " `maxPerKind` nodes per kind; every node reached with its score, path and attributes.")
    public Stream<Walked> expand(
            @Name("user") String user,
            @Name("seeds") List<String> seeds,
            @Name("scores") List<Double> scores,
            @Name("depth") long depth,
            @Name("fanout") long fanout,
            @Name("maxPerKind") long maxPerKind,
            @Name("hopDecay") double hopDecay,
            @Name("sparse") long sparse,
            @Name("notAfter") Double notAfter,
            @Name("validAt") Double validAt)
            throws KernelException {
        if (seeds == null || scores == null || seeds.size() != scores.size()) {
            throw new IllegalArgumentException("hrt.expand: seeds and as many scores are required");
        }
        if (depth < 0 || depth > MAX_DEPTH) {
            throw new IllegalArgumentException("hrt.expand: depth must be 0 to " + MAX_DEPTH + ", got " + depth);
        }
        try (Walker walker = new Walker(tx, user, (int) Math.min(Math.max(fanout, 0), Integer.MAX_VALUE), sparse,
                notAfter, validAt)) {
            return Stream.of(walker.run(seeds, scores, (int) depth, maxPerKind, hopDecay));
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

    /** A node the walk reached (graph_walk's best[node]): its best score, the hop and seed of its best
     * path, that path's last step (null for a seed), and the hop it was first reached at. */
    private static final class Reached {
        final long ref;
        final String id;
        final int first;
        double score;
        int hops;
        String seed;
        Step path;

        Reached(long ref, String id, double score, int hops, String seed, Step path, int first) {
            this.ref = ref;
            this.id = id;
            this.score = score;
            this.hops = hops;
            this.seed = seed;
            this.path = path;
            this.first = first;
        }
    }

    /** One step of a path, after the steps {@code before} it (paths share their beginnings). */
    private record Step(Step before, String type, String id, boolean forward, int length) {
        Step(Step before, String type, String id, boolean forward) {
            this(before, type, id, forward, before == null ? 1 : before.length + 1);
        }
    }

    /** A link and its relationship's weight. */
    private record Offer(Link link, double weight) {}

    private record Info(boolean visible, String kind) {}

    /** graph_walk's frontier order, key (-score, id): best score first (0.0 and -0.0 tie, as in
     * Python), then id (class comment). */
    private static final Comparator<Reached> FRONTIER = (a, b) -> {
        int c = GraphReader.cmp(b.score, a.score);
        return c != 0 ? c : a.id.compareTo(b.id);
    };

    private static final class Walker extends GraphReader {
        private final int fanout;
        private final long sparse;
        private final int[] types; // the token ids of TYPE_NAMES that exist
        private final int mentions;
        private final Comparator<Link> order;
        private final PropertySelection linkKeys, mentionKeys, infoKeys;
        private final int kindKey;

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
            kindKey = tokens.propertyKey("kind");
            infoKeys = selection(tsKey, kindKey);
        }

        /** graph_walk.walk (class comment), then each reached node's row. */
        Walked run(List<String> seeds, List<Double> scores, int depth, long maxPerKind, double hopDecay)
                throws KernelException {
            Map<Long, Reached> best = new LinkedHashMap<>(); // by node; ids and nodes are one to one
            Map<String, Integer> perKind = new HashMap<>();
            Integer[] strongest = new Integer[seeds.size()];
            for (int i = 0; i < strongest.length; i++) {
                if (seeds.get(i) == null || scores.get(i) == null) {
                    throw new IllegalArgumentException("hrt.expand: a seed or its score is null");
                }
                strongest[i] = i;
            }
            Arrays.sort(strongest, (a, b) -> {
                int c = GraphReader.cmp(scores.get(b), scores.get(a));
                return c != 0 ? c : seeds.get(a).compareTo(seeds.get(b));
            });
            for (int i : strongest) {
                String id = seeds.get(i);
                long ref = find(id);
                if (ref < 0 || best.containsKey(ref)) {
                    continue;
                }
                Info info = info(ref);
                if (!info.visible()) {
                    continue;
                }
                best.put(ref, new Reached(ref, id, scores.get(i), 0, id, null, 0));
                perKind.merge(info.kind(), 1, Integer::sum); // seeds count, but are never refused
            }

            Map<Long, List<Offer>> offers = new HashMap<>(); // a node's links, read once
            long read = 0;
            List<Reached> frontier = new ArrayList<>(best.values());
            frontier.sort(FRONTIER);
            for (int hop = 1; hop <= depth; hop++) {
                Set<Reached> reached = new HashSet<>();
                for (Reached current : frontier) {
                    // as of now: a node improved earlier in this hop offers its improved path
                    double score = current.score;
                    String seed = current.seed;
                    Step path = current.path;
                    List<Offer> links = offers.get(current.ref);
                    if (links == null) {
                        links = offers(current.ref, current.id);
                        offers.put(current.ref, links);
                        read += links.size();
                    }
                    int taken = 0;
                    for (Offer offer : links) {
                        if (taken >= fanout) {
                            break;
                        }
                        Link link = offer.link();
                        Reached previous = best.get(link.otherNode());
                        Info info = null;
                        if (previous == null) { // a node in best is visible
                            info = info(link.otherNode());
                            if (!info.visible()) {
                                continue; // invisible neighbours do not use up the fan-out
                            }
                        }
                        taken++;
                        double candidate = score * hopDecay * offer.weight(); // Python's order of operations
                        if (previous != null) {
                            if (previous.score >= candidate) {
                                continue; // ties keep the path found first (visit order)
                            }
                            previous.score = candidate;
                            previous.hops = hop;
                            previous.seed = seed;
                            previous.path = new Step(path, typeNames[link.type()], link.other(), link.forward());
                            reached.add(previous); // keeps the hop it was first reached at
                        } else {
                            int count = perKind.getOrDefault(info.kind(), 0);
                            if (count >= maxPerKind) {
                                continue;
                            }
                            perKind.put(info.kind(), count + 1);
                            Step step = new Step(path, typeNames[link.type()], link.other(), link.forward());
                            Reached found = new Reached(link.otherNode(), link.other(), candidate, hop, seed, step, hop);
                            best.put(found.ref, found);
                            reached.add(found);
                        }
                    }
                }
                frontier = new ArrayList<>(reached);
                frontier.sort(FRONTIER);
                if (frontier.isEmpty()) {
                    break;
                }
            }

            List<Object> walk = new ArrayList<>(best.size());
            List<Object> nodes = new ArrayList<>(best.size());
            for (Reached r : best.values()) {
                walk.add(Arrays.asList(r.id, r.score, (long) r.hops, r.seed, steps(r.path), (long) r.first));
                nodes.add(row(r.ref));
            }
            return new Walked(walk, nodes, read);
        }

        /** Whether a node is visible as of notAfter, and its kind (the walk's per-kind key). */
        private Info info(long ref) {
            Value ts = Values.NO_VALUE, kind = Values.NO_VALUE;
            if (positioned(other, ref)) {
                other.properties(properties, infoKeys);
                while (properties.next()) {
                    int key = properties.propertyKey();
                    if (key == tsKey) ts = properties.propertyValue();
                    else if (key == kindKey) kind = properties.propertyValue();
                }
            }
            return new Info(visible(ts), kind instanceof TextValue text ? text.stringValue() : null);
        }

        /** The node's first {@code fanout} visible links in visit order, with their weights. */
        private List<Offer> offers(long ref, String id) throws KernelException {
            List<Link> links = links(ref, id);
            List<Offer> out = new ArrayList<>(links.size());
            for (Link link : links) {
                if (!(weight(link.relationship()) instanceof Number weight)) {
                    throw new IllegalStateException("hrt.expand: a relationship of node " + id + " has no weight");
                }
                out.add(new Offer(link, weight.doubleValue()));
            }
            return out;
        }

        private static List<Object> steps(Step last) {
            Object[] out = new Object[last == null ? 0 : last.length()];
            for (Step step = last; step != null; step = step.before()) {
                out[step.length() - 1] = Arrays.asList(step.type(), step.id(), step.forward());
            }
            return Arrays.asList(out);
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

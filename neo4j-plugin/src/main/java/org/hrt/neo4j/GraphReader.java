package org.hrt.neo4j;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.neo4j.exceptions.KernelException;
import org.neo4j.graphdb.Transaction;
import org.neo4j.internal.kernel.api.CursorFactory;
import org.neo4j.internal.kernel.api.EntityCursor;
import org.neo4j.internal.kernel.api.IndexQueryConstraints;
import org.neo4j.internal.kernel.api.IndexReadSession;
import org.neo4j.internal.kernel.api.NodeCursor;
import org.neo4j.internal.kernel.api.NodeValueIndexCursor;
import org.neo4j.internal.kernel.api.PropertyCursor;
import org.neo4j.internal.kernel.api.PropertyIndexQuery;
import org.neo4j.internal.kernel.api.Read;
import org.neo4j.internal.kernel.api.RelationshipScanCursor;
import org.neo4j.internal.kernel.api.RelationshipTraversalCursor;
import org.neo4j.internal.kernel.api.TokenRead;
import org.neo4j.internal.schema.IndexDescriptor;
import org.neo4j.io.pagecache.context.CursorContext;
import org.neo4j.kernel.api.KernelTransaction;
import org.neo4j.kernel.impl.coreapi.InternalTransaction;
import org.neo4j.memory.MemoryTracker;
import org.neo4j.storageengine.api.PropertySelection;
import org.neo4j.token.api.TokenConstants;
import org.neo4j.values.storable.ArrayValue;
import org.neo4j.values.storable.NumberValue;
import org.neo4j.values.storable.TextValue;
import org.neo4j.values.storable.Value;
import org.neo4j.values.storable.Values;

/**
 * One procedure call's reads of one user's graph through the kernel's cursors (Neo4j's internal
 * API; the plugin is built for one Neo4j version, see pom.xml): the tokens HRT's projection uses,
 * a few reusable cursors, node lookups by (user_id, id), node rows as the adapter reads them, and
 * visibility as of {@code notAfter}. Not thread safe; closed when the call ends.
 */
class GraphReader implements AutoCloseable {
    /** The types expansion walks: every type HRT writes but SUPERSEDES (two versions of one fact). */
    static final String[] TYPE_NAMES = {"MENTIONS", "RELATED_TO", "DERIVED_FROM", "FOLLOWS"};
    // the node properties of a node row, in row order (hrt/stores/neo4j_graph.py _node)
    private static final String[] ROW_KEYS = {"id", "kind", "label", "ts", "salience", "category", "tags",
            "source_agent_id", "valid_from", "valid_to"};

    final KernelTransaction ktx;
    final Read read;
    final CursorFactory cursors;
    final CursorContext context;
    final MemoryTracker memory;
    final String user;
    final Value userValue;
    final Double notAfter;
    /** Relationships are walked only when their own interval holds at it (all of them when null). */
    final Double validAt;
    /** The smallest visible link key (-ts of a link's other end) as of notAfter. */
    final double minKey;
    final int entity, userKey, idKey, tsKey, salienceKey, sidKey, tidKey, nwKey, stsKey, ttsKey, weightKey;
    final int validFromKey, validToKey;
    final int[] rowKeys;
    final String[] typeNames; // relationship type token id -> name (null for other types)
    final PropertySelection rowSelection, idOnly, tsOnly, weightOnly, intervalKeys;
    final NodeCursor node, other;
    final RelationshipTraversalCursor relationships;
    final RelationshipScanCursor scan;
    final PropertyCursor properties;
    private final Map<String, IndexReadSession> sessions = new HashMap<>();

    GraphReader(Transaction tx, String user, Double notAfter, Double validAt) {
        if (user == null) {
            throw new IllegalArgumentException("user is required");
        }
        this.ktx = ((InternalTransaction) tx).kernelTransaction();
        this.read = ktx.dataRead();
        this.cursors = ktx.cursors();
        this.context = ktx.cursorContext();
        this.memory = ktx.memoryTracker();
        this.user = user;
        this.userValue = Values.stringValue(user);
        this.notAfter = notAfter;
        this.validAt = validAt;
        this.minKey = notAfter == null ? Double.NEGATIVE_INFINITY : 0.0 - notAfter;
        TokenRead tokens = ktx.tokenRead();
        entity = tokens.nodeLabel("Entity");
        userKey = tokens.propertyKey("user_id");
        idKey = tokens.propertyKey("id");
        tsKey = tokens.propertyKey("ts");
        salienceKey = tokens.propertyKey("salience");
        sidKey = tokens.propertyKey("sid");
        tidKey = tokens.propertyKey("tid");
        nwKey = tokens.propertyKey("nw");
        stsKey = tokens.propertyKey("sts");
        ttsKey = tokens.propertyKey("tts");
        weightKey = tokens.propertyKey("weight");
        validFromKey = tokens.propertyKey("valid_from");
        validToKey = tokens.propertyKey("valid_to");
        rowKeys = Arrays.stream(ROW_KEYS).mapToInt(tokens::propertyKey).toArray();
        int highest = 0;
        for (String name : TYPE_NAMES) {
            highest = Math.max(highest, tokens.relationshipType(name));
        }
        typeNames = new String[highest + 1];
        for (String name : TYPE_NAMES) {
            int id = tokens.relationshipType(name);
            if (id != TokenConstants.NO_TOKEN) {
                typeNames[id] = name;
            }
        }
        rowSelection = selection(rowKeys);
        idOnly = selection(idKey);
        tsOnly = selection(tsKey);
        weightOnly = selection(weightKey);
        intervalKeys = selection(validFromKey, validToKey);
        node = cursors.allocateNodeCursor(context, memory);
        other = cursors.allocateNodeCursor(context, memory);
        relationships = cursors.allocateRelationshipTraversalCursor(context, memory);
        scan = cursors.allocateRelationshipScanCursor(context, memory);
        properties = cursors.allocatePropertyCursor(context, memory);
    }

    /** A selection of the keys that exist (a key no entity has yet has no token). */
    static PropertySelection selection(int... keys) {
        int[] known = Arrays.stream(keys).filter(k -> k != TokenConstants.NO_TOKEN).toArray();
        return known.length == 0 ? PropertySelection.NO_PROPERTIES : PropertySelection.selection(known);
    }

    static boolean missing(int token) {
        return token == TokenConstants.NO_TOKEN;
    }

    static int cmp(double a, double b) {
        return a < b ? -1 : (a > b ? 1 : 0);
    }

    @Override
    public void close() {
        node.close();
        other.close();
        relationships.close();
        scan.close();
        properties.close();
    }

    /** The node of (user, id), from the uniqueness constraint's index; -1 when there is none. */
    long find(String id) throws KernelException {
        if (missing(entity) || missing(userKey) || missing(idKey)) {
            return -1;
        }
        IndexDescriptor index = ktx.schemaRead().indexGetForName("entity_user_id");
        if (index == IndexDescriptor.NO_INDEX) {
            throw new IllegalStateException("HRT's procedures need the constraint entity_user_id (apply graph_schema/)");
        }
        try (NodeValueIndexCursor cursor = cursors.allocateNodeValueIndexCursor(context, memory)) {
            read.nodeIndexSeek(ktx.queryContext(), read.indexReadSession(index), cursor,
                    IndexQueryConstraints.unconstrained(),
                    PropertyIndexQuery.exact(userKey, user), PropertyIndexQuery.exact(idKey, id));
            return cursor.next() ? cursor.nodeReference() : -1;
        }
    }

    IndexReadSession session(String name) throws KernelException {
        IndexReadSession session = sessions.get(name);
        if (session == null) {
            IndexDescriptor index = ktx.schemaRead().indexGetForName(name);
            if (index == IndexDescriptor.NO_INDEX) {
                throw new IllegalStateException("HRT's procedures need the index " + name + " (apply graph_schema/)");
            }
            session = read.indexReadSession(index);
            sessions.put(name, session);
        }
        return session;
    }

    boolean positioned(NodeCursor cursor, long ref) {
        read.singleNode(ref, cursor);
        return cursor.next();
    }

    /** One property of a node (NO_VALUE without it), through the {@code other} cursor. */
    Value propertyOf(long ref, PropertySelection key) {
        if (!positioned(other, ref)) {
            return Values.NO_VALUE;
        }
        other.properties(properties, key);
        return properties.next() ? properties.propertyValue() : Values.NO_VALUE;
    }

    Value tsOf(long ref) {
        return propertyOf(ref, tsOnly);
    }

    String idOf(long ref) {
        return propertyOf(ref, idOnly) instanceof TextValue text ? text.stringValue() : null;
    }

    /** A node exists as of notAfter unless it is timestamped after it. */
    boolean visible(Value ts) {
        return notAfter == null || !(ts instanceof NumberValue n) || n.doubleValue() <= notAfter;
    }

    /** A link key {@code k} (-ts of the other end, 0 without one) is visible as of notAfter when
     * k >= -notAfter, or when the other end has no ts at all. */
    boolean visibleKey(double key, long otherNode) {
        return key >= minKey || (key == 0.0 && tsOf(otherNode) == Values.NO_VALUE);
    }

    /** Whether an interval holds at validAt: valid_from included, valid_to excluded, an absent (or
     * non-numeric) end open; every interval holds without validAt (as the Cypher query's
     * {@code coalesce(valid_from <= $valid_at, true) AND coalesce($valid_at < valid_to, true)}). */
    boolean holds(Value from, Value to) {
        if (validAt == null) {
            return true;
        }
        double at = validAt;
        return !(from instanceof NumberValue f && f.doubleValue() > at)
                && !(to instanceof NumberValue t && at >= t.doubleValue());
    }

    /** Whether the interval of the relationship under an entity cursor holds at validAt; reads its
     * valid_from/valid_to only when there is a validAt. */
    boolean holds(EntityCursor cursor) {
        if (validAt == null || (missing(validFromKey) && missing(validToKey))) {
            return true;
        }
        Value from = Values.NO_VALUE, to = Values.NO_VALUE;
        cursor.properties(properties, intervalKeys);
        while (properties.next()) {
            int key = properties.propertyKey();
            if (key == validFromKey) from = properties.propertyValue();
            else if (key == validToKey) to = properties.propertyValue();
        }
        return holds(from, to);
    }

    /** [id, kind, label, ts, salience, category, tags, source_agent_id, valid_from, valid_to] of a node, through the
     * {@code node} cursor; values as the procedures return them (arrays as lists). */
    Object[] rowValues(long ref) {
        Object[] values = new Object[rowKeys.length];
        if (positioned(node, ref)) {
            node.properties(properties, rowSelection);
            while (properties.next()) {
                int key = properties.propertyKey();
                for (int i = 0; i < rowKeys.length; i++) {
                    if (rowKeys[i] == key) {
                        values[i] = output(properties.propertyValue());
                    }
                }
            }
        }
        return values;
    }

    static Object output(Value value) {
        Object copy = value.asObjectCopy();
        if (value instanceof ArrayValue) {
            int size = java.lang.reflect.Array.getLength(copy);
            List<Object> items = new ArrayList<>(size);
            for (int i = 0; i < size; i++) {
                items.add(java.lang.reflect.Array.get(copy, i));
            }
            return items;
        }
        return copy;
    }

    /** A relationship's weight, as stored. */
    Object weight(long relationship) {
        read.singleRelationship(relationship, scan);
        if (scan.next()) {
            scan.properties(properties, weightOnly);
            if (properties.next()) {
                return properties.propertyValue().asObjectCopy();
            }
        }
        return null;
    }
}

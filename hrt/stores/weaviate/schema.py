"""HRT's Weaviate collection: its properties, its creation, and what an existing one must have
(:func:`unfit`)."""

from __future__ import annotations

import weaviate
from weaviate.classes.config import (
    Configure,
    DataType,
    Property,
    StopwordsPreset,
    Tokenization,
    VectorDistances,
)
from weaviate.collections.classes.config import CollectionConfig

DEFAULT_COLLECTION = "HRTEntity"
PROPERTIES = ("entity_id", "kind", "text", "ts", "tags", "source_agent_id", "valid_from", "valid_to", "passages")
# added after the first collections were made: apply_schema adds them to an older collection
FILTER_PROPERTIES = ("tags", "source_agent_id")  # search filters
VALIDITY_PROPERTIES = ("valid_from", "valid_to")  # facts that change
PASSAGE_PROPERTIES = ("passages",)  # passage vectors
LATER_PROPERTIES = (*FILTER_PROPERTIES, *VALIDITY_PROPERTIES, *PASSAGE_PROPERTIES)


def _later_properties() -> list[Property]:
    # filterable, not searchable: tag and agent filters match whole values (FIELD tokenization);
    # the interval is range-filtered (valid_at), null when open (no sentinel: see _valid_at)
    return [
        Property(name="tags", data_type=DataType.TEXT_ARRAY, tokenization=Tokenization.FIELD, index_searchable=False),
        Property(
            name="source_agent_id", data_type=DataType.TEXT, tokenization=Tokenization.FIELD, index_searchable=False
        ),
        Property(name="valid_from", data_type=DataType.NUMBER, index_range_filters=True),
        Property(name="valid_to", data_type=DataType.NUMBER, index_range_filters=True),
        # passage vectors (hrt.records.passage_texts): stored, read back by id, never indexed
        Property(name="passages", data_type=DataType.BLOB),
    ]


async def create_collection(client: weaviate.WeaviateAsyncClient, name: str, replication_factor: int) -> None:
    """Create HRT's collection ``name`` (fails when it exists)."""
    await client.collections.create(
        name,
        description="HRT entities: one object per (user, entity); one tenant per user",
        properties=[
            Property(
                name="entity_id",
                data_type=DataType.TEXT,
                tokenization=Tokenization.FIELD,
                index_searchable=False,
            ),
            Property(
                name="kind",
                data_type=DataType.TEXT,
                tokenization=Tokenization.FIELD,
                index_searchable=False,
            ),
            Property(
                name="text",
                data_type=DataType.TEXT,
                tokenization=Tokenization.WORD,
                index_filterable=False,
                text_analyzer=Configure.text_analyzer(ascii_fold=True),  # as FTS5 unicode61 folds diacritics
            ),
            Property(name="ts", data_type=DataType.NUMBER, index_range_filters=True),
            *_later_properties(),
        ],
        vector_config=Configure.Vectors.self_provided(
            vector_index_config=Configure.VectorIndex.hnsw(distance_metric=VectorDistances.COSINE)
        ),
        inverted_index_config=Configure.inverted_index(stopwords_preset=StopwordsPreset.NONE),
        multi_tenancy_config=Configure.multi_tenancy(
            enabled=True, auto_tenant_creation=True, auto_tenant_activation=True
        ),
        # asynchronous replication (a node back from an outage is repaired) is Weaviate's
        # default from v1.38 for a factor above 1: no switch to send
        replication_config=Configure.replication(factor=replication_factor),
    )


def unfit(config: CollectionConfig) -> list[str]:
    """What an existing collection lacks of what HRT relies on (empty when it fits)."""
    problems = []
    if not config.multi_tenancy_config.enabled:
        problems.append("multi-tenancy is off")
    if not config.multi_tenancy_config.auto_tenant_creation:
        problems.append("auto tenant creation is off")
    missing = set(PROPERTIES) - {p.name for p in config.properties}
    if missing:
        problems.append(f"properties {sorted(missing)} are missing")
    vector_configs = config.vector_config or {}
    default = vector_configs.get("default")
    metric = getattr(getattr(default, "vector_index_config", None), "distance_metric", None)
    if metric is not VectorDistances.COSINE:
        problems.append(f"the default vector's distance is {metric}, not cosine")
    return problems

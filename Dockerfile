# The shardcat image of docker-compose.yml: the Dask scheduler, the workers and
# the demo job all run it, so client and workers have the same shardcat, Dask
# and s3fs (Dask requires that). Build context: the repository root.
#
#   docker build -t shardcat .
#   docker run --rm shardcat shardcat --help
FROM python:3.11-slim

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1

WORKDIR /opt/shardcat
COPY pyproject.toml README.md ./
# migrations/ installs as the package shardcat.migrations (pyproject.toml's package-dir).
COPY migrations ./migrations
COPY src ./src
# The extras a cluster needs: S3, PostgreSQL, Dask, zstd/lz4; bokeh for the Dask dashboard.
RUN pip install '.[compression,s3,postgres,dask]' 'bokeh>=3.1'

# Run as a user, in a folder of its own (a SQLite catalog or local output lands here).
RUN useradd --create-home --uid 1000 shardcat
USER shardcat
WORKDIR /home/shardcat

# The scheduler, the workers and the demo get their commands from docker-compose.yml.
CMD ["shardcat", "--help"]

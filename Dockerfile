# The shardcat image of docker-compose.yml: the Dask scheduler, the workers and
# the demo job all run it, so client and workers have the same shardcat, Dask
# and s3fs (Dask requires that). Build context: the repository root.
#
#   docker build -t shardcat:dev .
#   docker run --rm shardcat:dev shardcat --help
#
# The base image is pinned to an exact Python (the one constraints/dev.txt was
# frozen with), and every Python package to the versions the tests run with.
FROM python:3.11.7-slim-bookworm

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1

WORKDIR /opt/shardcat
COPY constraints/dev.txt ./constraints/dev.txt
COPY pyproject.toml README.md LICENSE ./
# migrations/ installs as the package shardcat.migrations (pyproject.toml's package-dir).
COPY migrations ./migrations
COPY src ./src
# The extras a cluster needs: S3, PostgreSQL, Dask, zstd/lz4, bokeh for the Dask
# dashboard, and the HTTP API (serve); versions from constraints/dev.txt (without it pip
# may pick untested ones).
RUN pip install -c constraints/dev.txt '.[compression,s3,postgres,dask,dashboard,serve]'

# Run as a user, in a folder of its own (a SQLite catalog or local output lands here).
RUN useradd --create-home --uid 1000 shardcat
USER shardcat
WORKDIR /home/shardcat

# The scheduler, the workers, the demo and the API get their commands from docker-compose.yml.
CMD ["shardcat", "--help"]

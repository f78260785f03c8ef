#!/usr/bin/env bash
# Install shardcat with every extra into .venv and run the whole test suite:
# ruff, then pytest against real SQLite, PostgreSQL, S3 (moto), Azure (Azurite), GCS
# (gcp-storage-emulator, installed with the dev extra) and Dask.
# Usage: bash scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[dev]' -c constraints/dev.txt

# PostgreSQL for the catalog tests: start the local cluster if it is down.
export SHARDCAT_TEST_POSTGRES_URL=${SHARDCAT_TEST_POSTGRES_URL:-postgresql+psycopg://postgres@127.0.0.1:5432/test}
pg_up() {
  .venv/bin/python - <<'PY' >/dev/null 2>&1
import os, sqlalchemy as sa
e = sa.create_engine(os.environ["SHARDCAT_TEST_POSTGRES_URL"], connect_args={"connect_timeout": 3})
with e.connect() as c:
    c.execute(sa.text("select 1"))
PY
}
if ! pg_up; then
  if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
    echo "starting PostgreSQL..."
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n 1)" main start || true
    for _ in $(seq 1 30); do pg_up && break; sleep 1; done
  fi
fi
if ! pg_up; then
  if [ "${CI:-}" = "true" ]; then
    echo "error: PostgreSQL is not reachable at $SHARDCAT_TEST_POSTGRES_URL and could not be started" >&2
    exit 1
  fi
  echo "warning: PostgreSQL is not reachable; its tests will be skipped (they never are in CI)" >&2
fi

# Azurite (the Azure Storage emulator, from the npm registry) for the Azure tests,
# installed into the project-local .cache/node (git-ignored) when missing.
AZURITE_VERSION=3.37.0
AZURITE=.cache/node/node_modules/.bin/azurite-blob
if [ ! -x "$AZURITE" ] || [ "$(cat .cache/node/azurite.version 2>/dev/null)" != "$AZURITE_VERSION" ]; then
  if command -v npm >/dev/null 2>&1; then
    echo "installing azurite@$AZURITE_VERSION into .cache/node..."
    if npm install --prefix .cache/node --no-audit --no-fund --loglevel=error \
      "azurite@$AZURITE_VERSION" >/dev/null; then
      echo "$AZURITE_VERSION" > .cache/node/azurite.version
    fi
  fi
fi
if [ ! -x "$AZURITE" ]; then
  if [ "${CI:-}" = "true" ]; then
    echo "error: azurite could not be installed (npm install --prefix .cache/node azurite@$AZURITE_VERSION)" >&2
    exit 1
  fi
  echo "warning: azurite is not installed (needs npm); the Azure tests will be skipped (they never are in CI)" >&2
fi

# Debian's Chromium and ChromeDriver for the browser tests of `shardcat serve`'s page
# (tests/serve/test_page_browser.py drives them headless through Selenium).
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = "0" ]; then
    echo "installing chromium and chromium-driver (apt)..."
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver) \
      >/dev/null 2>&1 || true
  fi
fi
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  if [ "${CI:-}" = "true" ]; then
    echo "error: chromium and chromedriver could not be installed (apt-get install chromium chromium-driver)" >&2
    exit 1
  fi
  echo "warning: chromium is not installed; the browser tests will be skipped (they never are in CI)" >&2
fi

.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
# The layering contracts ([tool.importlinter] in pyproject.toml): a broken one fails the run.
.venv/bin/lint-imports --no-cache
# Two test processes (pytest-xdist), one file each at a time: module fixtures (Dask clusters,
# servers) start once per file. SHARDCAT_TEST_WORKERS=0 runs everything in this process.
exec .venv/bin/python -m pytest -p no:cacheprovider -n "${SHARDCAT_TEST_WORKERS:-2}" --dist loadfile "$@"

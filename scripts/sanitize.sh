#!/usr/bin/env bash
# Build shardcat's compiled extensions with AddressSanitizer + UndefinedBehaviorSanitizer in a
# copy of this tree, and run tests against them (by default the format, tar and compiled-lookup
# tests and the differential fuzzers). Any sanitizer report aborts the run with its stack.
#
# Usage: bash scripts/sanitize.sh [pytest args...]
# Needs the test command's .venv (bash scripts/test.sh installs it) and gcc's libasan/libubsan.
# docs/RELIABILITY.md ("Compiled code under sanitizers") keeps the last result.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY="$ROOT/.venv/bin/python"
OUT=${SHARDCAT_SANITIZE_DIR:-$ROOT/.cache/sanitize}

rm -rf "$OUT"
mkdir -p "$OUT"
# The sources, the tests and the docs some of them check, without the normally built extensions.
cp -r src tests migrations benchmarks docs pyproject.toml README.md LICENSE "$OUT"/
find "$OUT/src" -name '*.so' -delete
find "$OUT" -name __pycache__ -prune -exec rm -rf {} +

SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
(
  cd "$OUT"
  CFLAGS="-O1 -g $SAN" LDFLAGS="$SAN" "$PY" -c 'from setuptools import setup; setup()' \
    build_ext --inplace >build.log 2>&1 || { cat build.log >&2; exit 1; }
)
# The extensions are optional in a normal build; here each one must have been built.
for ext in format/_ccodec format/_cmapguard storage/_cwrite format/tar/_ctar reading/_cpoint; do
  if ! ls "$OUT/src/shardcat/$ext".*.so >/dev/null 2>&1; then
    echo "error: $ext was not built with the sanitizers (see $OUT/build.log)" >&2
    exit 1
  fi
done

export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
# Python's own allocator hides use-after-free of objects from ASan: every object goes to malloc.
export PYTHONMALLOC=malloc
# CPython itself leaks by design at exit; the child processes some tests fork die by signal.
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:allow_user_segv_handler=1:handle_segv=1:detect_stack_use_after_return=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export PYTHONPATH="$OUT/src"
# Tests and fuzzers check this to refuse running on the normal build by mistake.
export SHARDCAT_SANITIZED=1
cd "$OUT"
"$PY" - <<'PY'
import os
import shardcat.reading._cpoint as p
import shardcat.format._ccodec as c
import shardcat.format._cmapguard as g
import shardcat.format.tar._ctar as t
import shardcat.storage._cwrite as w
for m in (c, g, w, t, p):
    assert m.__file__.startswith(os.environ["PYTHONPATH"]), m.__file__
    print("sanitized:", m.__file__)
PY
if [ "$#" -eq 0 ]; then
  set -- tests/format tests/catalog/test_point_compiled.py tests/catalog/test_point_compiled_tar.py \
    tests/catalog/test_batch_compiled.py tests/storage/test_write_failures.py tests/fuzz
fi
# --capture=sys: a sanitizer writes its report to file descriptor 2 and aborts; pytest's
# default capture of that descriptor would lose the report with the process.
exec "$PY" -m pytest -p no:cacheprovider -n 0 -q -x --capture=sys "$@"

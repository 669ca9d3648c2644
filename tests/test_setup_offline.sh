#!/usr/bin/env bash
# test_setup_offline.sh: the Quick start with the package index unreachable.
#
# A copy of the repository's files (tracked and untracked, not ignored, without any
# build or virtual environment) runs scripts/setup.sh with PyPI pointed at a port
# where nothing listens and pip's cache off: setup must finish (the PyPI packages
# skipped, each with one line saying so), build ctrain, and that ctrain must train
# one epoch. The Debian packages setup needs are those CI installed before (apt has
# nothing to fetch). The copy builds without CUDA, MPI and tests, to stay short.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
fail() { echo "test_setup_offline: $*" >&2; exit 1; }

(cd "$root" && git ls-files -co --exclude-standard -z | tar --null -T - -cf -) | tar -xf - -C "$scratch"
[ ! -e "$scratch/build" ] && [ ! -e "$scratch/.venv-tensorboard" ] || fail "the copy holds build output"

echo "== setup.sh with PyPI unreachable =="
rc=0
(cd "$scratch" && PIP_INDEX_URL=http://127.0.0.1:9/simple PIP_EXTRA_INDEX_URL= PIP_NO_CACHE_DIR=1 \
   PIP_FIND_LINKS= CTRAIN_MESON_ARGS="-Dcuda=disabled -Dmpi=disabled -Dtests=false" \
   bash scripts/setup.sh) >"$scratch/setup.txt" 2>&1 || rc=$?
[ "$rc" -eq 0 ] || { tail -n 30 "$scratch/setup.txt"; fail "setup.sh failed offline (exit $rc)"; }
grep -q "^setup.sh: skipped tensorboard (PyPI could not be reached" "$scratch/setup.txt" ||
  { cat "$scratch/setup.txt"; fail "setup.sh did not say that it skipped tensorboard"; }
[ -x "$scratch/build/ctrain" ] || fail "no build/ctrain after setup"
grep -q "^setup.sh: installing python3-torch\|^setup.sh: installing libcmocka" "$scratch/setup.txt" &&
  fail "setup.sh without --tests installed test-only packages"

echo "== one epoch from the offline build =="
(cd "$scratch" && ./build/ctrain fit configs/mlp.yaml --epochs 1 --no-progress \
   --out "$scratch/run") >"$scratch/fit.txt" 2>&1 ||
  { cat "$scratch/fit.txt"; fail "the offline build did not train"; }
grep -q "^Epoch 01 |" "$scratch/fit.txt" || { cat "$scratch/fit.txt"; fail "no epoch line"; }
echo "test_setup_offline: ok"

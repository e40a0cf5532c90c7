#!/usr/bin/env bash
# CI step: the project works as an installed package, not only from a checkout.
#
# 1. Build the wheel (`pip wheel --no-deps`) from a clean copy of the checkout's files.
# 2. Create a fresh virtual environment. Its dependencies (torch, numpy, ...) are borrowed from the
#    project venv ($VENV, default .venv, made by `make setup`) through a .pth file that points at a
#    folder of links to that venv's packages -- every package except lengthgen's own editable
#    install -- so nothing is downloaded and torch is not copied.
# 3. `pip install --no-index` the wheel there: pip checks that every declared dependency is present.
# 4. From an empty directory outside the checkout (so only the installed package can be imported),
#    run the three commands a user would run first, and one that reads package data (rasp/turing/specs/).
#
# Usage: .ci/wheel_check.sh        (VENV=path/to/venv to borrow another environment's packages)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
[ -f "$ROOT/pyproject.toml" ] || { echo "wheel_check: $ROOT is not the project root" >&2; exit 2; }
VENV=${VENV:-.venv}
case "$VENV" in /*) ;; *) VENV="$ROOT/$VENV" ;; esac
PY="$VENV/bin/python"
[ -x "$PY" ] || { echo "wheel_check: no Python at $PY (run 'make setup' first)" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/wheel_check.XXXXXX")
trap 'rm -rf "$work"' EXIT
started=$(date +%s)

# 1. Build from a copy of the files git knows (tracked, or untracked and not ignored), so stale
#    build/ folders or local runs cannot leak into the wheel; outside git, build in place.
mkdir -p "$work/src" "$work/dist"
src="$ROOT"
if git -C "$ROOT" rev-parse --show-toplevel >/dev/null 2>&1; then
    git -C "$ROOT" ls-files -z --cached --others --exclude-standard > "$work/files"
    (cd "$ROOT" && xargs -0 cp --parents -t "$work/src" < "$work/files")
    src="$work/src"
fi
# The project venv's setuptools builds the wheel when it is recent enough (no download); otherwise
# pip fetches the build backend named in pyproject.toml.
isolation=--no-build-isolation
"$PY" -c 'import setuptools, sys; sys.exit(int(setuptools.__version__.split(".")[0]) < 64)' 2>/dev/null || isolation=
"$PY" -m pip wheel -q --disable-pip-version-check --no-deps $isolation -w "$work/dist" "$src"
wheel=$(ls "$work/dist"/lengthgen-*.whl)
echo "built $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB)   [$(( $(date +%s) - started )) s]"

# 2. A fresh venv that sees the project venv's dependencies, but not its lengthgen.
"$PY" -m venv --without-pip "$work/venv"
site=$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
shared=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
mkdir -p "$work/deps"
for entry in "$shared"/*; do
    case "$(basename "$entry")" in
        lengthgen*|__editable__*lengthgen*|constructions|rasp|*.pth|__pycache__) ;;  # not lengthgen's own files
        *) ln -s "$entry" "$work/deps/" ;;
    esac
done
echo "$work/deps" > "$site/_borrowed_dependencies.pth"

# 3. Install the wheel; --no-index: the dependencies must all be satisfied by what is borrowed.
"$PY" -m pip --python "$work/venv/bin/python" install -q --disable-pip-version-check --no-index --no-compile "$wheel"

# 4. Run from an empty directory: neither the checkout nor PYTHONPATH may help.
mkdir -p "$work/elsewhere"
cd "$work/elsewhere"
unset PYTHONPATH
py="$work/venv/bin/python"
"$py" -c 'import lengthgen, constructions, rasp, sys
for m in (lengthgen, constructions, rasp):
    assert "/venv/" in m.__file__, f"{m.__name__} imported from {m.__file__}, not the installed wheel"' \
    || { echo "wheel_check: lengthgen, constructions or rasp is missing from the wheel or imported from outside it" >&2; exit 1; }
check() {
    echo "+ python $*   [$(( $(date +%s) - started )) s]"
    if ! "$py" "$@" > "$work/out.txt" 2>&1; then
        cat "$work/out.txt" >&2
        echo "wheel_check: FAILED: python $*" >&2
        exit 1
    fi
    tail -n 3 "$work/out.txt"
}
check -m constructions.addition --digits 50
check -m rasp.turing --machine addition --input 12+34
check -m constructions.nope --task addition --digits 3
check -m rasp.turing --machine parity --input 1011_   # package data: rasp/turing/specs/parity.json
check -m constructions.addition.certify precision     # package data: the cached precision map
echo "wheel_check: OK in $(( $(date +%s) - started )) s"

# Sourced by the scripts: creates .venv and installs the project with its dev
# extra (or the extras in TARRY_EXTRAS, e.g. "dev,bench"), again only when
# pyproject.toml or the extras changed since the last install.
python=${PYTHON:-python3}
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "Tarry needs Python >= 3.11; set PYTHON=/path/to/python3.11 or newer." >&2
    exit 1
fi
if [ ! -x .venv/bin/python ]; then
    "$python" -m venv .venv
fi
stamp=.venv/.tarry-installed
extras=${TARRY_EXTRAS:-dev}
want="$(sha256sum pyproject.toml | cut -d' ' -f1) $extras"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -e ".[$extras]"
    echo "$want" > "$stamp"
fi
export PATH="$PWD/.venv/bin:$PATH"

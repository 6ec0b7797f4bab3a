# Sourced by the scripts: creates .venv and installs the project with its dev
# extra (or the extras in TARRY_EXTRAS, e.g. "dev,bench"), again only when
# pyproject.toml or the extras changed since the last install. Each step says
# what it does, and pip's collection is counted, so a first install is never a
# silent minute.
python=${PYTHON:-python3}
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "Tarry needs Python >= 3.11; set PYTHON=/path/to/python3.11 or newer." >&2
    exit 1
fi

# One line per package pip collects, then pip's own summary; pip's errors and
# warnings stay on stderr untouched.
_tarry_pip_progress() {
    awk '/^Collecting /          { n++; printf "  [%3d] %s\n", n, $2; fflush() }
         /^Installing collected/ { printf "  installing %d packages...\n", n; fflush() }
         /^Successfully installed/ { print "  done"; fflush() }'
}

stamp=.venv/.tarry-installed
extras=${TARRY_EXTRAS:-dev}
want="$(sha256sum pyproject.toml | cut -d' ' -f1) $extras"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    if [ ! -x .venv/bin/python ]; then
        echo "setup 1/3: creating .venv with $("$python" --version)" >&2
        "$python" -m venv .venv
    else
        echo "setup 1/3: .venv exists; pyproject.toml or the extras changed" >&2
    fi
    echo "setup 2/3: upgrading pip" >&2
    .venv/bin/python -m pip install --quiet --upgrade pip
    echo "setup 3/3: installing Tarry with its [$extras] extra (a minute or two the first time)" >&2
    .venv/bin/python -m pip install -e ".[$extras]" | _tarry_pip_progress >&2
    echo "$want" > "$stamp"
fi
export PATH="$PWD/.venv/bin:$PATH"

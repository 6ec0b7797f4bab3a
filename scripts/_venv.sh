# Sourced by the scripts: creates .venv and installs the project with its dev
# extra (or the extras in TARRY_EXTRAS, e.g. "dev,bench"; scripts/demo asks for
# "cli" alone), again only when pyproject.toml changed since the last install or
# it lacks an extra asked for (the dev extra holds cli's). uv installs it:
# it resolves as pip does, from PyPI, in seconds rather than a minute (pip
# bootstraps it into the venv, so nothing but Python is needed). Each step says
# what it does.
python=${PYTHON:-python3}
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "Tarry needs Python >= 3.11; set PYTHON=/path/to/python3.11 or newer." >&2
    exit 1
fi

stamp=.venv/.tarry-installed
extras=${TARRY_EXTRAS:-dev}
want="$(sha256sum pyproject.toml | cut -d' ' -f1) $extras"
had="$(cat "$stamp" 2>/dev/null || true)"
# The demo's cli extra is in every install a script makes: a dev venv serves it as is.
if [ "$extras" = cli ] && [ "${had%% *}" = "${want%% *}" ]; then
    want=$had
fi
if [ "$had" != "$want" ]; then
    if [ ! -x .venv/bin/python ]; then
        echo "setup 1/3: creating .venv with $("$python" --version)" >&2
        "$python" -m venv .venv
    else
        echo "setup 1/3: .venv exists; pyproject.toml or the extras changed" >&2
    fi
    echo "setup 2/3: installing uv into .venv" >&2
    .venv/bin/python -m pip install --quiet uv
    echo "setup 3/3: installing Tarry with its [$extras] extra" >&2
    # uv's summary lines, without its line per package.
    .venv/bin/uv pip install --python .venv/bin/python -e ".[$extras]" 2>&1 |
        grep -v '^ [-+~] ' >&2
    echo "$want" > "$stamp"
fi
export PATH="$PWD/.venv/bin:$PATH"

# Sourced by scripts/test and scripts/bench: installs the suite's and the bench's
# PostgreSQL with pgvector, PGlite's npm packages (scripts/pglite/package.json, their
# versions pinned in its package-lock.json), into scripts/pglite/node_modules, which git
# ignores; again only when the lock file changed since. `npm ci` installs exactly the
# lock file, from the npm registry: the tests themselves download nothing
# (bench/pglite.py starts the server).
pglite=scripts/pglite
pglite_want=$(sha256sum "$pglite/package-lock.json" | cut -d' ' -f1)
if [ "$(cat "$pglite/node_modules/.tarry-installed" 2>/dev/null || true)" != "$pglite_want" ]; then
    if ! command -v npm >/dev/null; then
        echo "error: the PostgreSQL tests need Node 20 or newer and npm, for PGlite" \
            "(Debian: apt-get install nodejs npm)" >&2
        exit 1
    fi
    echo "installing PGlite with pgvector for the PostgreSQL tests (npm ci in $pglite)" >&2
    (cd "$pglite" && npm ci --no-audit --no-fund --loglevel=error >&2)
    echo "$pglite_want" > "$pglite/node_modules/.tarry-installed"
fi

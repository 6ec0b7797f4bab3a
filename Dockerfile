# The Tarry worker for docker-compose.yml: `python -m workers`, configured from
# the environment (TEMPORAL_ADDRESS, OPENAI_BASE_URL, OPENAI_API_KEY, TARRY_MODEL, ...).
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1

WORKDIR /app
COPY . .
# The same install as scripts/_venv.sh's (uv there, to make a venv in seconds; pip here,
# which needs no bootstrap, from the same index), which the README's commands run, so the
# image runs what the tests ran. tests/test_compose.py keeps the two equal.
RUN python -m pip install --quiet -e '.[dev]'

# Not root: the worker runs tools on behalf of a model. Its workspaces and large
# payloads live in volumes, which Docker seeds with these directories' owner on first use.
RUN useradd --create-home --uid 1000 tarry \
    && mkdir -p /data/workspaces /data/payloads \
    && chown -R tarry:tarry /data
USER tarry
ENV TARRY_WORKSPACE_ROOT=/data/workspaces \
    TARRY_STORAGE_DIR=/data/payloads

CMD ["python", "-m", "workers"]

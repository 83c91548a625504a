# syntax=docker/dockerfile:1
# cliffwatch: the service (`cliffwatch serve`, the default command) and the built-in simulated LLM
# (`cliffwatch target`), in one image. docker-compose.yml runs both next to PostgreSQL and Toxiproxy.
#
#   docker build -t cliffwatch .
#   docker run -p 127.0.0.1:8080:8080 -v cliffwatch-data:/var/lib/cliffwatch cliffwatch

# --- build: the package and its dependencies, without the dev extras, into a venv copied below ---------
FROM python:3.11-slim AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
# What the install needs first, so a change to the scenarios or docs does not redo it.
COPY pyproject.toml README.md ./
COPY src/ src/
# A regular (non-editable) install: the venv holds a copy of the package, not a link to /src.
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install .

# The files the service reads at run time besides the package. migrations/ and alembic.ini are copied
# when the tree has them (the migrations are being written while this file is), so the image still
# builds from a tree that has none yet.
COPY . .
RUN mkdir -p /app/migrations \
    && cp -R scenarios /app/scenarios \
    && if [ -d migrations ]; then cp -R migrations/. /app/migrations/; fi \
    && if [ -f alembic.ini ]; then cp alembic.ini /app/alembic.ini; fi

# --- runtime ---------------------------------------------------------------------------------------------
FROM python:3.11-slim

# A fixed uid, so a bind-mounted data directory can be given to it (chown 10001).
RUN groupadd --system --gid 10001 cliffwatch \
    && useradd --system --uid 10001 --gid cliffwatch --home-dir /home/cliffwatch --create-home \
        --shell /usr/sbin/nologin cliffwatch

COPY --from=build /opt/venv /opt/venv
COPY --from=build /app /app

ENV PATH=/opt/venv/bin:$PATH
ENV PYTHONUNBUFFERED=1
ENV PYTHONDONTWRITEBYTECODE=1

# Where the package finds its data. The code looks for scenarios/, migrations/ and alembic.ini in the
# repository root, found from its own files (scenario_files.py: Path(__file__).parents[3]; store/migrate.py:
# parents[4]). In a non-editable install that directory is the venv's lib/python3.11/, so the image links
# the copies in /app from there; the path is asked of the installed package rather than written here. /app is also the working directory, for tools that look in the
# current directory (alembic reads ./alembic.ini). The build fails if the bundled scenarios are not found.
RUN set -eu; \
    root="$(python -c 'from cliffwatch.adapters.scenario_files import BUNDLED_DIR; print(BUNDLED_DIR.parent)')"; \
    for item in scenarios migrations alembic.ini; do \
        if [ -e "/app/$item" ]; then ln -s "/app/$item" "$root/$item"; fi; \
    done; \
    python -c 'from cliffwatch.adapters.scenario_files import bundled_names; assert bundled_names(), "no bundled scenarios"'

# What must survive the container: the SQLite database (when no PostgreSQL URL is given) and the state
# directory. Owned by the service's user, so a named volume mounted here starts out writable by it.
RUN mkdir -p /var/lib/cliffwatch/state \
    && chown -R cliffwatch:cliffwatch /var/lib/cliffwatch \
    && chmod 700 /var/lib/cliffwatch/state

# Listen on every interface of the container (the default, 127.0.0.1, would be unreachable from outside
# it); publishing the port is the choice of whoever runs the container.
ENV CLIFFWATCH_LISTEN_HOST=0.0.0.0
ENV CLIFFWATCH_LISTEN_PORT=8080
ENV CLIFFWATCH_DATABASE_URL=sqlite+aiosqlite:////var/lib/cliffwatch/cliffwatch.db
ENV CLIFFWATCH_STATE_DIR=/var/lib/cliffwatch/state
ENV CLIFFWATCH_LOG_FORMAT=json

USER cliffwatch
WORKDIR /app
EXPOSE 8080

# slim has no curl: the standard library asks /healthz on the port the service was told to listen on.
# urlopen raises on a refused connection, a timeout or an HTTP error status, and the check fails.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('CLIFFWATCH_LISTEN_PORT', '8080') + '/healthz', timeout=4)"]

CMD ["cliffwatch", "serve"]

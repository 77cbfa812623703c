# memtap in a container: a plain mirror of the Makefile's install (`pip install .` of this
# checkout; the Makefile installs the same package editable, with the dev tools, into .venv).
# No Docker engine runs on the development machines, so CI does not build this image;
# `make test` is what CI runs.
#
#   docker build -t memtap .
#   docker run -p 8750:8750 -v memtap-data:/data -e MEMTAP_API_KEYS=KEY=PRINCIPAL memtap
#
# The server binds 0.0.0.0 so the published port reaches it. memtap refuses to serve memory
# on a non-loopback address without authentication, so the container exits at start unless
# API keys are set: MEMTAP_API_KEYS="key=principal,key2=principal2". Clients then send
# `Authorization: Bearer KEY` and are recorded as that principal. /healthz needs no key.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY memtap ./memtap
RUN python -m pip install --upgrade pip \
    && python -m pip install . \
    && rm -rf /src

RUN useradd --create-home --uid 10001 --user-group memtap \
    && mkdir -p /data \
    && chown memtap:memtap /data

USER memtap
WORKDIR /home/memtap

# The trace and the builtin memory live in one SQLite file (plus its -wal and -shm files).
ENV MEMTAP_DB=/data/memtap.db
VOLUME /data
EXPOSE 8750

HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8750/healthz', timeout=4)"]

CMD ["memtap", "serve", "--http", "0.0.0.0:8750"]

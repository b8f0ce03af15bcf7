# Sundial's `serve` in a container: the scheduler, its API and UI in one process, on
# either backend. docs/CLOUD_RUN.md deploys it on Cloud Run with the cloud backend.
#
#   docker build -t sundial .
#   docker run -p 8080:8080 -e SUNDIAL_API_TOKENS=TOKEN=user:you@example.com \
#       -e SUNDIAL_ADMINS=user:you@example.com -v "$PWD/examples/configs:/app/configs:ro" sundial
#
# The server listens on 0.0.0.0 (loopback would be out of reach from outside the
# container), which `serve` allows only when callers must prove who they are:
# SUNDIAL_API_TOKENS, or Google's identities (SUNDIAL_ID_TOKEN_AUDIENCE,
# SUNDIAL_IAP_AUDIENCE). Without any of them it refuses to start and says why.

# The base is an argument so that a build can name a mirror of the same image.
ARG PYTHON_IMAGE=python:3.13-slim
FROM ${PYTHON_IMAGE}

LABEL org.opencontainers.image.title="Sundial" \
      org.opencontainers.image.description="A durable job scheduler: cron with seconds and time zones, one-off jobs, fan-out, HTTP, Pub/Sub and Cloud Tasks deliveries; SQLite or Cloud Datastore and Cloud Tasks" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.documentation="docs/CLOUD_RUN.md"

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

# Dependencies first, in a layer of their own: it is rebuilt only when the pins change.
# Every pin publishes a wheel for this Python, so no compiler is needed.
RUN python3 -m venv /opt/venv
COPY requirements.txt /app/requirements.txt
RUN pip install --no-cache-dir -r /app/requirements.txt

# The code belongs to root and is only read by the server's own user, which owns
# nothing but /data (the embedded backend's database). Bytecode is compiled here,
# because the server may not write next to the sources.
WORKDIR /app
COPY main.py ./
COPY app/ app/
COPY cli/ cli/
COPY config/ config/
COPY engine/ engine/
COPY statemachine/ statemachine/
COPY web/ web/
RUN python -m compileall -q /app \
    && groupadd --system --gid 10001 sundial \
    && useradd --system --uid 10001 --gid 10001 --home-dir /data --no-create-home \
       --shell /usr/sbin/nologin sundial \
    && mkdir -p /app/configs /data \
    && chown 10001:10001 /data && chmod 700 /data

# Project files: bake them in with a derived image (`COPY configs/ /app/configs/`) or
# mount a directory here. The database path matters to the embedded backend only.
ENV SUNDIAL_CONFIG_DIR=/app/configs \
    SUNDIAL_DB=/data/sundial.db

USER 10001:10001
EXPOSE 8080

# Cloud Run ignores HEALTHCHECK (it has probes of its own); Docker and podman (with
# --format docker) run it. /healthz answers on the loopback name whatever the mode.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('PORT', '8080'), timeout=4)"]

# $PORT is Cloud Run's (default 8080). exec: serve is PID 1 and gets SIGTERM itself, and
# stops within SUNDIAL_STOP_GRACE (8s): nothing new is sent after it, requests on the wire
# get until a second before the end, and what is left is sent again under its invocation
# id after the next start. Docker and Cloud Run kill the container 10 s after SIGTERM
# (`docker stop -t 30` waits longer: raise SUNDIAL_STOP_GRACE with it); Kubernetes after
# terminationGracePeriodSeconds (30 s).
CMD ["sh", "-c", "exec python main.py serve --host 0.0.0.0 --port \"${PORT:-8080}\" --require-identity"]

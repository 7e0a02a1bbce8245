# syntax=docker/dockerfile:1
# activeaudit-monitor daemon image.
#   docker build -t activeaudit-monitor .
#   docker run -v $PWD/monitor.yaml:/etc/activeaudit-monitor/monitor.yaml:ro \
#              -v monitor-state:/var/lib/activeaudit-monitor activeaudit-monitor
# No secret is baked in: Kafka credentials come from the environment at run time through
# {env: VARIABLE} references in the mounted config (see config/monitor.yaml, kafka.client).

# ---- build: install the package and its dependencies into a virtual environment
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/activeaudit-monitor
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY monitor ./monitor
# with the optional librdkafka client (kafka.client_library: confluent-kafka)
RUN /opt/activeaudit-monitor/bin/pip install '.[confluent]'

# ---- runtime: the virtual environment only, run by an unprivileged user
FROM python:3.11-slim
ENV PATH=/opt/activeaudit-monitor/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
RUN groupadd --system --gid 10001 monitor \
 && useradd --system --uid 10001 --gid monitor --no-create-home \
      --home-dir /var/lib/activeaudit-monitor --shell /usr/sbin/nologin monitor \
 && mkdir -p /var/lib/activeaudit-monitor /etc/activeaudit-monitor \
 && chown monitor:monitor /var/lib/activeaudit-monitor
COPY --from=build /opt/activeaudit-monitor /opt/activeaudit-monitor
# The reference configuration as a default; deployments mount their own over it.
COPY config/monitor.yaml /etc/activeaudit-monitor/monitor.yaml

# State (SQLite, one writer): mount a volume here so it survives restarts.
VOLUME ["/var/lib/activeaudit-monitor"]
WORKDIR /var/lib/activeaudit-monitor
USER 10001:10001

# /metrics, /healthz and /readyz (metrics.port in the config)
EXPOSE 9464

# Liveness: /healthz answers 200 while the process is alive. Assumes metrics.port 9464 and a
# listen address that includes the loopback (127.0.0.1 or 0.0.0.0). python:slim has no curl.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9464/healthz', timeout=4)"]

# SIGTERM stops the daemon cleanly (flush, commit, close); give it time (docker stop -t 60).
STOPSIGNAL SIGTERM
ENTRYPOINT ["monitor", "run", "--config", "/etc/activeaudit-monitor/monitor.yaml"]

# ResolveAI in one image: `docker compose up` (compose.yaml) runs it behind nginx on Postgres.
# Build stage: the Python packages, llama.cpp compiled from source with its runtime CPU variants
# (never for the build machine alone: a native build traps on CPUs without its instructions).
FROM python:3.11-slim-bookworm AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends g++ cmake make \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY requirements.txt ./
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON"
# torch from its CPU index first, so nothing pulls a CUDA build; then llama.cpp, then the rest.
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0 \
    && /opt/venv/bin/pip install --no-deps "$(grep -E '^llama_cpp_python==' requirements.txt)" \
    && /opt/venv/bin/pip install -r requirements.txt

# Runtime stage: the venv and the app, no compiler, run as a user of its own.
FROM python:3.11-slim-bookworm
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 10001 resolveai
COPY --from=build /opt/venv /opt/venv
WORKDIR /app
COPY --chown=resolveai:resolveai . .
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    LITELLM_LOCAL_MODEL_COST_MAP=True \
    HF_HUB_OFFLINE=1 \
    APP_HOST=0.0.0.0 \
    APP_PORT=8000 \
    APP_DATA_DIR=/app/data
RUN mkdir -p /app/data && chown resolveai:resolveai /app/data
USER 10001
VOLUME ["/app/data"]
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/api/health', timeout=2).status != 200)"]
# SIGTERM: the server stops taking requests and lets its replies finish (SHUTDOWN_GRACE_SECONDS).
STOPSIGNAL SIGTERM
CMD ["python", "server.py"]

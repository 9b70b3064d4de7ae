# The console's terminal widget comes from the npm registry at build time (never committed).
FROM node:20-slim AS console
WORKDIR /build
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund

# shellgate runs arbitrary commands: the image runs them as an unprivileged user.
FROM python:3.11-slim

RUN apt-get update \
 && apt-get install -y --no-install-recommends bash bubblewrap procps tini \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --create-home --uid 10001 shellgate \
 && mkdir /data && chown shellgate:shellgate /data

WORKDIR /app
COPY pyproject.toml setup.py README.md alembic.ini constraints.txt ./
COPY sdk ./sdk
COPY app ./app
COPY migrations ./migrations
COPY --from=console /build/node_modules ./node_modules
# Editable, so that the app finds node_modules/ (the console's xterm.js) beside its package.
# The versions the suite passed on (constraints.txt), as `make run` installs them; the client
# (sdk/, distribution shellgate-client) beside the server, which depends on it.
RUN pip install --no-cache-dir -c constraints.txt -e ./sdk -e '.[postgres]'
# The server runs as a user that cannot write here, so without this every start would compile
# the app's modules from source again (about half of the start: bench/PROFILE.md).
RUN python -m compileall -q app sdk migrations

USER shellgate
ENV SHELLGATE_HOST=0.0.0.0 \
    SHELLGATE_PORT=8000 \
    SHELLGATE_DATA_DIR=/data \
    SHELLGATE_WORKSPACE=/home/shellgate
VOLUME ["/data"]
EXPOSE 8000
# Confinement: run with a cgroup namespace of its own (`docker run --cgroupns=private`, compose
# `cgroup: private`). With a writable delegated cgroup v2 each command gets a cgroup; otherwise
# the server uses per-process rlimits and says so in its log and in GET /v1/info (README).
ENV SHELLGATE_CONFINEMENT=auto
# tini reaps the orphans of finished commands (PID 1 must, or they stay zombies).
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["shellgate", "serve"]

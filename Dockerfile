# Anvil's container image: `anvil serve` on 0.0.0.0:8000 with Entra sign-in and the Cosmos DB
# store, answering from the Markdown in docs/. See docs/deployment.md.
#
#   docker build \
#     --build-arg VERSION=0.6.0 \
#     --build-arg REVISION="$(git rev-parse HEAD)" \
#     --build-arg SOURCE=https://github.com/<owner>/<repository> \
#     -t anvil .
#
# Reproducible inputs: the base image is pinned by digest (the multi-platform index of
# python:3.11.17-slim-trixie), and every Python package comes from requirements.lock, pinned
# with its hashes. To move to a newer base, read the index digest of the tag with
#
#   docker buildx imagetools inspect python:3.11-slim-trixie
#
# and replace the digest below; a new Python minor version also needs a new requirements.lock
# (docs/development.md, "Dependencies").

FROM python:3.11.17-slim-trixie@sha256:45037981b62b34b44602584fccbc4d884d5f7dc92c7ee86bb38a698a79fe1e51 AS base


# Build stage: a virtual environment with the locked dependencies, then Anvil itself.
FROM base AS build

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1

RUN python -m venv /opt/anvil

WORKDIR /src

# The dependencies before the code: this layer is reused until requirements.lock changes.
# Wheels only (no compiler here or later), each checked against the lock's hashes; `--no-deps`
# because the lock already lists every package the install needs.
COPY requirements.lock ./
RUN /opt/anvil/bin/pip install --no-cache-dir --require-hashes --no-deps --only-binary=:all: \
        -r requirements.lock

# pyproject.toml names README.md as the package's readme, so the build needs it. Built with the
# locked setuptools (no build isolation, so nothing unhashed is downloaded), which is then removed:
# nothing imports it at run time.
COPY pyproject.toml README.md ./
COPY app ./app
RUN /opt/anvil/bin/pip install --no-cache-dir --no-deps --no-build-isolation . \
    && /opt/anvil/bin/pip uninstall --yes setuptools


# Runtime stage: the base image, the environment and the docs; no compiler, no pip cache.
FROM base

ARG VERSION=0.6.0
ARG REVISION=""
ARG SOURCE=""

LABEL org.opencontainers.image.title="Anvil" \
      org.opencontainers.image.description="Sessionless MCP service with conversation history" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}"

# A fixed numeric id, so orchestrators can check that the user is not root.
RUN groupadd --system --gid 10001 anvil \
    && useradd --system --uid 10001 --gid anvil --no-create-home --shell /usr/sbin/nologin anvil \
    && install --directory --owner anvil --group anvil --mode 0700 /var/lib/anvil

# Owned by root and read-only for the user that runs it.
COPY --from=build /opt/anvil /opt/anvil

WORKDIR /srv/anvil
# The retrieval corpus.
COPY docs ./docs
# Its index, every passage embedded by the local model (which the wheel carries: no download), so
# that every replica ranks by meaning from its first request instead of embedding at start. The
# docs' vector seed (docs/.anvil-vectors) makes this quick; ANVIL_INDEX below serves it. A
# deployment's own index (a blob URL in ANVIL_INDEX) takes its place; to answer from a mounted
# folder instead, set ANVIL_CORPUS_DIR and clear ANVIL_INDEX (`ANVIL_INDEX=`). Run before the ENV
# below, whose sign-in and store settings `anvil index` does not need.
RUN /opt/anvil/bin/anvil index /srv/anvil/docs --output /srv/anvil/docs.anvilidx \
        --name "Anvil's documentation" \
        --description "how to run, configure, sign in to, deploy and use Anvil, the MCP service that answers questions from documents and keeps conversation history"

# Dev sign-in only binds to loopback (Anvil refuses it on 0.0.0.0), so the image defaults to
# Entra sign-in; it still needs ANVIL_ENTRA_TENANT_ID, ANVIL_ENTRA_CLIENT_ID and
# ANVIL_COSMOS_ENDPOINT, and stops at start-up with one line naming whichever is missing.
# Bytecode was compiled at install; the user could not write more anyway.
ENV PATH=/opt/anvil/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    ANVIL_HOST=0.0.0.0 \
    ANVIL_PORT=8000 \
    ANVIL_AUTH_MODE=entra \
    ANVIL_STORE=cosmos \
    ANVIL_INDEX=/srv/anvil/docs.anvilidx \
    ANVIL_DATA_DIR=/var/lib/anvil

USER 10001:10001

EXPOSE 8000

# No HEALTHCHECK: Azure Container Apps ignores it and probes /healthz and /readyz itself (the
# probes in terraform/app.tf), and a Docker health check would start a Python process in every
# replica every interval for nothing. Locally, `curl http://127.0.0.1:8000/healthz` does the same.
CMD ["anvil", "serve", "--host", "0.0.0.0"]

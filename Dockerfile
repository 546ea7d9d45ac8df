# Anvil's container image: `anvil serve` on 0.0.0.0:8000 with Entra sign-in and the Cosmos DB
# store, answering from the Markdown in docs/. See docs/deployment.md.
#
#   docker build -t anvil .
#
# The build stage installs Anvil (a regular, non-editable install) and its dependencies into a
# virtual environment; the runtime stage copies only that environment and the docs.

FROM python:3.11-slim AS build

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1

RUN python -m venv /opt/anvil

WORKDIR /src
# pyproject.toml names README.md as the package's readme, so the build needs it.
COPY pyproject.toml README.md ./
COPY app ./app
RUN /opt/anvil/bin/pip install --no-cache-dir .


FROM python:3.11-slim

# A fixed numeric id, so orchestrators can check that the user is not root.
RUN groupadd --system --gid 10001 anvil \
    && useradd --system --uid 10001 --gid anvil --no-create-home --shell /usr/sbin/nologin anvil \
    && install --directory --owner anvil --group anvil --mode 0700 /var/lib/anvil

COPY --from=build /opt/anvil /opt/anvil

WORKDIR /srv/anvil
# The retrieval corpus.
COPY docs ./docs

# Dev sign-in only binds to loopback (Anvil refuses it on 0.0.0.0), so the image defaults to
# Entra sign-in; it still needs ANVIL_ENTRA_TENANT_ID, ANVIL_ENTRA_CLIENT_ID and
# ANVIL_COSMOS_ENDPOINT, and stops at start-up with one line naming whichever is missing.
ENV PATH=/opt/anvil/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    ANVIL_HOST=0.0.0.0 \
    ANVIL_PORT=8000 \
    ANVIL_AUTH_MODE=entra \
    ANVIL_STORE=cosmos \
    ANVIL_CORPUS_DIR=/srv/anvil/docs \
    ANVIL_DATA_DIR=/var/lib/anvil

USER 10001:10001

EXPOSE 8000

# The slim image has no curl; Python's standard library does the request.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('ANVIL_PORT', '8000'), timeout=4)"]

CMD ["anvil", "serve"]

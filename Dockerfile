# The default sandbox image of codecoder's @docker environment (`codecoder-sandbox`).
#
# No registry is reachable on the machines this is built on, so the base is a local image made
# by scripts/docker-setup.sh (debootstrap bookworm minbase + python3, git, bash, coreutils,
# imported with `docker import`). Build with:  scripts/docker-setup.sh
#   or, once the base exists:                 DOCKER_BUILDKIT=0 docker build -t codecoder-sandbox .
#
# Any other image becomes a sandbox image the same way, from this one:
#   codecoder image build --from node:20 --tag my-node-sandbox
# which builds `FROM node:20`, copies /opt/codecoder from this image, runs install.py and sets
# the label below (environments/docker/image.py).

# Stage 1: the agent and the interpreter it runs on, bundled so that they need nothing of the
# image they end up in (sandboxes/image/bundle.py).
FROM codecoder-base:bookworm AS agent
COPY sandboxes/image/install.py sandboxes/image/bundle.py \
     sandboxes/image/runas-x86_64 sandboxes/image/runas-aarch64 /tmp/codecoder/
COPY sandboxes/image/agent/ /tmp/codecoder/agent/
RUN python3 -I -S /tmp/codecoder/bundle.py /tmp/codecoder /opt/codecoder

# Stage 2: the image. What install.py adds: the unprivileged user 10001 (`sandbox`, the fallback
# when the workspace belongs to root; the runtime runs commands as the workspace's owner),
# /workspace, git's safe.directory (the bind-mounted workspace's owner differs from the
# container user whenever it belongs to root), and a check that the agent can run here.
FROM codecoder-base:bookworm
COPY --from=agent /opt/codecoder /opt/codecoder
RUN ["/opt/codecoder/python/ld.so", "--library-path", "/opt/codecoder/python/lib", \
     "/opt/codecoder/python/bin/python3", "-I", "-S", "/opt/codecoder/install.py"]

ENV HOME=/tmp \
    LANG=C.UTF-8 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /workspace
USER 10001:10001
# codecoder.agent: the protocol of the agent inside (environments.docker.channel.AGENT_PROTOCOL); the
# runtime refuses an image without it.
LABEL org.opencontainers.image.title="codecoder-sandbox" \
      org.opencontainers.image.description="Sandbox image for codecoder's @docker environment" \
      codecoder.agent="5"

ENTRYPOINT []
CMD ["/opt/codecoder/python/ld.so", "--library-path", "/opt/codecoder/python/lib", \
     "/opt/codecoder/python/bin/python3", "-I", "-S", "-B", "/opt/codecoder/agent"]

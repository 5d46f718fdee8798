# The default sandbox image of codecoder's @docker environment (`codecoder-sandbox`).
#
# No registry is reachable on the machines this is built on, so the base is a local image made
# by scripts/docker-setup.sh (debootstrap bookworm minbase + python3, git, bash, coreutils,
# imported with `docker import`). Build with:  scripts/docker-setup.sh
#   or, once the base exists:                 DOCKER_BUILDKIT=0 docker build -t codecoder-sandbox .
FROM codecoder-base:bookworm

# The default unprivileged user. The runtime starts the container as root, with only the
# capabilities its agent needs to drop privileges, and the agent runs every command as the
# owner of the workspace (so files it writes belong to the user); this user is the fallback
# when the workspace belongs to root, and gives `id` a name to print. What the agent needs of
# an image: python3 (standard library only), /proc, and starting as root.
RUN groupadd --gid 10001 sandbox \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /bin/bash sandbox \
 && mkdir -p /workspace /opt/codecoder/capability \
 # The workspace is bind-mounted from the host and its owner differs from the container
 # user whenever the workspace belongs to root; git's ownership check would refuse to read it.
 && git config --system --add safe.directory '*'

COPY sandboxes/image/agent.py sandboxes/image/runas-x86_64 sandboxes/image/runas-aarch64 \
     /opt/codecoder/

ENV HOME=/tmp \
    LANG=C.UTF-8 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /workspace
USER 10001:10001
LABEL org.opencontainers.image.title="codecoder-sandbox" \
      org.opencontainers.image.description="Sandbox image for codecoder's @docker environment"

# -I: ignore PYTHON* variables and the user site; -S: skip site (faster start, nothing needed).
CMD ["python3", "-I", "-S", "/opt/codecoder/agent.py"]

#!/usr/bin/env bash
# Build the service and agent images, then prove that each starts:
#   - the service image migrates a scratch database and answers /readyz against it;
#   - the agent image runs `tps agent probe --device cpu`.
#
#   deploy/build_images.sh                        # build and prove, Postgres at 127.0.0.1:5432
#   TPS_PROOF_POSTGRES=postgresql+psycopg://u:p@host:5432 deploy/build_images.sh
#
# The builder is Docker where a Docker engine answers, else buildah (Debian's package; no
# daemon, no root daemon): `buildah bud` builds the same Dockerfiles, and `buildah run` starts
# the images with chroot isolation and the host's network. Where no registry of images is
# reachable, the Debian base image is made here with debootstrap from Debian's archive
# (BASE=... names another). The agent image takes torch from TORCH_SPEC; PIP_FIND_LINKS, when
# set to a folder of wheels, is mounted into a buildah build so that a local wheel (the CPU
# build of torch, say) is preferred over PyPI's CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
SERVICE_IMAGE=${SERVICE_IMAGE:-tps-service:$VERSION}
AGENT_IMAGE=${AGENT_IMAGE:-tps-agent:$VERSION}
BASE=${BASE:-}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
POSTGRES=${TPS_PROOF_POSTGRES:-postgresql+psycopg://postgres@127.0.0.1:5432}
ROOTFS_CACHE=${ROOTFS_CACHE:-/var/tmp/tps-rootfs}
PORT=${TPS_PROOF_PORT:-$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}

say() { printf '== %s\n' "$*"; }

if docker info >/dev/null 2>&1; then
    BUILDER=docker
elif command -v buildah >/dev/null; then
    BUILDER=buildah
else
    echo "neither a Docker engine nor buildah: apt-get install buildah (or start Docker)" >&2
    exit 2
fi
say "builder: $BUILDER ($($BUILDER --version))"

# -- the base image --------------------------------------------------------------------------
if [[ -z $BASE ]]; then
    if [[ $BUILDER == docker ]] && docker pull -q debian:bookworm-slim >/dev/null 2>&1; then
        BASE=debian:bookworm-slim
    else
        BASE=localhost/debian:bookworm-slim
        if ! buildah inspect --type image "$BASE" >/dev/null 2>&1; then
            say "no image registry reachable: making $BASE with debootstrap"
            rootfs="$ROOTFS_CACHE/bookworm"
            if [[ ! -x $rootfs/usr/bin/apt-get ]]; then
                rm -rf "$rootfs"
                mkdir -p "$ROOTFS_CACHE"
                debootstrap --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian \
                    >"$ROOTFS_CACHE/debootstrap.log" 2>&1 ||
                    { tail -20 "$ROOTFS_CACHE/debootstrap.log"; exit 1; }
                say "debootstrap: $(grep -c '^I: Unpacking' "$ROOTFS_CACHE/debootstrap.log") packages unpacked into $rootfs"
            fi
            rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
            ctr=$(buildah from scratch)
            buildah copy --quiet "$ctr" "$rootfs" /
            buildah config --cmd /bin/bash --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$ctr"
            buildah commit --quiet --rm "$ctr" "$BASE" >/dev/null
        fi
    fi
fi
say "base image: $BASE"

# -- building ---------------------------------------------------------------------------------
build() {  # build FILE TAG [extra args...]
    local file=$1 tag=$2
    shift 2
    local started=$SECONDS
    if [[ $BUILDER == docker ]]; then
        docker build -q --build-arg "BASE=$BASE" "$@" -f "$file" -t "$tag" . >/dev/null
    else
        local mounts=()
        # A TLS-intercepting proxy's CA, where the host trusts one: update-ca-certificates in
        # the build stage picks it up from /usr/local/share/ca-certificates.
        [[ -r /etc/ssl/certs/ca-certificates.crt ]] &&
            mounts+=(-v /etc/ssl/certs/ca-certificates.crt:/usr/local/share/ca-certificates/build-host.crt:ro)
        buildah bud --quiet --isolation chroot --network host --layers --format docker \
            "${mounts[@]}" --build-arg "BASE=$BASE" "$@" -f "$file" -t "$tag" . >/dev/null
    fi
    say "built $tag from $file in $((SECONDS - started)) s"
}

agent_args=(--build-arg "TORCH_SPEC=$TORCH_SPEC")
if [[ -n ${PIP_FIND_LINKS:-} && $BUILDER == buildah ]]; then
    agent_args+=(-v "$PIP_FIND_LINKS:/wheels:ro" --build-arg TORCH_FIND_LINKS=/wheels)
fi
build deploy/Dockerfile "$SERVICE_IMAGE"
build deploy/agent.Dockerfile "$AGENT_IMAGE" "${agent_args[@]}"

# -- starting ---------------------------------------------------------------------------------
PROOF=tps-proof-$$
cleanup() {
    local status=$?
    if [[ -n ${SERVER_PID:-} ]]; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    if [[ $BUILDER == docker ]]; then
        docker ps -aq --filter "name=$PROOF-" | xargs -r docker rm -f >/dev/null || true
    else
        buildah containers --format '{{.ContainerName}}' | grep "^$PROOF-" | xargs -r buildah rm >/dev/null || true
    fi
    if [[ -n ${DB_NAME:-} ]]; then
        psql "${POSTGRES/+psycopg/}/postgres" -qc "DROP DATABASE IF EXISTS $DB_NAME WITH (FORCE)" >/dev/null || true
    fi
    exit "$status"
}
trap cleanup EXIT

start_server() {  # start_server IMAGE ENV... -- COMMAND...: like run_in, in the background
    local image=$1 envs=()
    shift
    while [[ $1 != -- ]]; do envs+=(-e "$1"); shift; done
    shift
    local name=$PROOF-server
    if [[ $BUILDER == docker ]]; then
        docker run --rm --name "$name" --network host "${envs[@]}" "$image" "$@" &
    else
        buildah from --quiet --name "$name" "$image" >/dev/null
        buildah run --isolation chroot --network host "${envs[@]}" "$name" -- "$@" &
    fi
    SERVER_PID=$!  # the builder's own process: stopping it stops the server
}

run_in() {  # run_in IMAGE ENV... -- COMMAND...: run a command in a fresh container of IMAGE
    local image=$1 envs=()
    shift
    while [[ $1 != -- ]]; do envs+=(-e "$1"); shift; done
    shift
    local name=$PROOF-$BASHPID-$RANDOM
    if [[ $BUILDER == docker ]]; then
        docker run --rm --name "$name" --network host "${envs[@]}" "$image" "$@"
    else
        buildah from --quiet --name "$name" "$image" >/dev/null
        buildah run --isolation chroot --network host "${envs[@]}" "$name" -- "$@"
    fi
}

say "service image: no torch, no embedded Postgres, no matplotlib; LightGBM loads"
run_in "$SERVICE_IMAGE" -- python3 -c '
import importlib.util as u, lightgbm, sys
absent = [m for m in ("torch", "pgserver", "matplotlib") if u.find_spec(m) is None]
print("absent:", ", ".join(absent), "| lightgbm", lightgbm.__version__, "| python", sys.version.split()[0])
sys.exit(len(absent) != 3)'

DB_NAME=tps_image_proof_$$
psql "${POSTGRES/+psycopg/}/postgres" -qc "CREATE DATABASE $DB_NAME"
DB_URL="$POSTGRES/$DB_NAME"
say "service image: tps db upgrade on a scratch database ($DB_NAME)"
run_in "$SERVICE_IMAGE" "TPS_DATABASE_URL=$DB_URL" "TPS_LOG_LEVEL=WARNING" -- tps db upgrade

say "service image: tps serve on port $PORT, then GET /readyz"
start_server "$SERVICE_IMAGE" "TPS_DATABASE_URL=$DB_URL" "TPS_LOG_LEVEL=WARNING" -- \
    tps serve --host 127.0.0.1 --port "$PORT" --no-migrate
deadline=$((SECONDS + 60))
until body=$(curl -fsS "http://127.0.0.1:$PORT/readyz" 2>/dev/null); do
    if ((SECONDS > deadline)) || ! kill -0 "$SERVER_PID" 2>/dev/null; then
        echo "the service image did not become ready within 60 s" >&2
        exit 1
    fi
    sleep 0.5
done
echo "GET /readyz -> $body"
curl -fsS -o /dev/null -w "GET /dashboard -> %{http_code} %{content_type}\n" "http://127.0.0.1:$PORT/dashboard"

kill "$SERVER_PID" && wait "$SERVER_PID" 2>/dev/null || true
SERVER_PID=
deadline=$((SECONDS + 15))
while curl -fsS -o /dev/null "http://127.0.0.1:$PORT/healthz" 2>/dev/null; do
    if ((SECONDS > deadline)); then
        echo "the service still answers on port $PORT 15 s after its container was stopped" >&2
        exit 1
    fi
    sleep 0.5
done
echo "stopped: nothing answers on port $PORT any more"

say "agent image: torch, NVML bindings, and one probe on the CPU"
run_in "$AGENT_IMAGE" -- python3 -c '
import pynvml, torch
print("torch", torch.__version__, "| CUDA runtime", torch.version.cuda, "| nvidia-ml-py", pynvml.__name__)'
run_in "$AGENT_IMAGE" "TPS_LOG_LEVEL=WARNING" -- \
    tps agent probe --device cpu --op gemm --shape 256x256x256 --dtype fp32

say "image sizes"
if [[ $BUILDER == docker ]]; then
    docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E "^(tps-service|tps-agent)"
else
    buildah images --format '{{.Name}}:{{.Tag}} {{.Size}}' | grep -E "/(tps-service|tps-agent):"
fi
say "both images built and started"

#!/usr/bin/env bash
# Download into .whl/ the cp312 wheels that the device's image lacks, for the benchmarks that
# run there (the device's calls name .whl in carry; the working tree and .whl travel within
# 64 MiB together, so take only the sets a call needs).
# Usage here: bash benchmarks/device_wheels.sh agent [cublaslt] [service]
#   agent     the core's and the agent's needs (pydantic, pydantic-settings, platformdirs, tenacity)
#   cublaslt  nvmath-python and its CUDA core, for the cuBLASLt provider (12 MB)
#   service   the embedded service that the runtime's fleet benchmarks start (27 MB with pgserver)
set -eu
versions() {  # NAME==VERSION as this checkout's .venv has it, or NAME alone
  for name in "$@"; do
    v=$(.venv/bin/python -m pip show "$name" 2>/dev/null | awk '/^Version/{print $2}')
    echo "$name${v:+==$v}"
  done
}
want=()
for set in "$@"; do
  case $set in
    agent) want+=($(versions pydantic pydantic-core pydantic-settings annotated-types typing-inspection python-dotenv platformdirs tenacity typing-extensions)) ;;
    cublaslt) want+=(nvmath-python==1.0.1 cuda-core==1.2.2 cuda-pathfinder==1.9.1) ;;
    service) want+=($(versions fastapi starlette opentelemetry-api uvicorn httptools sqlalchemy greenlet psycopg psycopg-binary alembic mako pgserver fasteners lightgbm)) ;;
    *) echo "unknown set $set (agent, cublaslt, service)" >&2; exit 2 ;;
  esac
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 -d .whl "${want[@]}"
du -sh .whl

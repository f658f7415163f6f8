# The TPS agent: probes kernels on the host's GPUs and pushes the runs to the service.
#   docker build -f deploy/agent.Dockerfile -t tps-agent:0.1.0 .
#   docker run --gpus all -e TPS_AGENT_TOKEN -e TPS_AGENT_DEPLOYMENT_SECRET tps-agent:0.1.0
# PyPI's torch wheel for Linux x86_64 carries the CUDA runtime, cuBLAS(Lt) and NCCL as
# nvidia-* wheels; the driver (libcuda, and libnvidia-ml for NVML telemetry) comes from the
# host through the NVIDIA Container Toolkit. For AMD GPUs, build with ROCm's wheel index:
#   --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/rocm6.4
ARG BASE=debian:bookworm-slim

FROM ${BASE} AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv python3-dev gcc ca-certificates \
 && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/tps
ARG TORCH_SPEC=torch==2.13.0
ARG TORCH_INDEX_URL=
# A folder of wheels inside the build (a mounted volume), searched before the index.
ARG TORCH_FIND_LINKS=
RUN /opt/tps/bin/pip install --no-cache-dir --disable-pip-version-check \
      ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} \
      ${TORCH_FIND_LINKS:+--find-links "$TORCH_FIND_LINKS"} "${TORCH_SPEC}"
WORKDIR /src
COPY pyproject.toml README.md ./
COPY tps ./tps
COPY services ./services
COPY migrations ./migrations
COPY models ./models
COPY agents ./agents
COPY client ./client
COPY cli ./cli
RUN /opt/tps/bin/pip install --no-cache-dir --disable-pip-version-check ".[agent]" \
 && /opt/tps/bin/pip uninstall -y --disable-pip-version-check pip

FROM ${BASE}
# gcc and the Python headers: Triton compiles its launcher stubs at run time.
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-dev gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --create-home --uid 10001 tps \
 && mkdir -p /var/lib/tps /etc/tps \
 && chown tps /var/lib/tps
COPY --from=build /opt/tps /opt/tps
COPY deploy/agent.yaml /etc/tps/agent.yaml
COPY benchmarks/workloads/gemm_llm_suite.csv /etc/tps/workloads/gemm_llm_suite.csv
USER tps
ENV PATH=/opt/tps/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
VOLUME /var/lib/tps
CMD ["tps", "agent", "run", "--config", "/etc/tps/agent.yaml"]

#!/usr/bin/env bash
# One device call: the new GPU model's kernel tests, then Llama decode at batch 32 on a new GPU
# model (a 64-SM green context) with the fleet's defaults and without the kernels' descent.
# Wheels first, here: bash benchmarks/device_wheels.sh agent service (carry .whl).
# Usage on the device: OUT=dir bash benchmarks/device_verify_new_gpu.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 TPS_AGENT_DEPLOYMENT_SECRET=bench-fleet-secret
{ date -u; nvidia-smi --query-gpu=name --format=csv,noheader; lscpu | grep 'Model name'; nproc; g++ --version | head -1; python3 -c "import sysconfig,os;p=sysconfig.get_paths()['include'];print(p, os.path.exists(p+'/Python.h'))"; python3 -c "import torch,os;print(torch.__version__, os.path.isdir(os.path.dirname(torch.__file__)+'/include/ATen'))"; ls /tmp/site/bin 2>/dev/null | head; } > $OUT/env.txt 2>&1
cat $OUT/env.txt
timeout 200 python3 -m pytest -v -p no:cacheprovider tests/gpu/test_gpu_runtime.py -k "new_gpu_model or kernel_descend" > $OUT/gpu_tests_new_gpu.txt 2>&1
tail -8 $OUT/gpu_tests_new_gpu.txt
timeout 330 python3 benchmarks/new_gpu_compiled.py --model llama3-8b-8l --case decode-b32 --sm-limit 64 --variants no_descend --second-host --timeout-s 300 --out $OUT/new_gpu_descend_llama_b32.json > $OUT/new_gpu_b32.log 2>&1
echo rc=$?; tail -30 $OUT/new_gpu_b32.log

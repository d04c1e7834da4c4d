#!/usr/bin/env bash
# One GPU session for issue 10: trace the real stacks on a lent H100, then score the fresh
# profiles against the measured H100 runs (data/measured/h100/runs.csv).
#
#   bench/gpu_trace_session.sh OUTDIR
#
# (a) `profile trace --device cuda`: the reference stack (our Megatron-structured PyTorch GPT) on
#     the mgpt_ model shapes and the Hugging Face stack on the llama_ and gpt2_ shapes of the
#     shared jobs: 2-layer shards, micro-batch 1/2/4, recompute none/full, the h2048 model also
#     unfused, plus tp 2 and 4 shards (with and without sequence parallelism);
# (b) bench/bench_traces.py with those profiles predicting every runs.csv row (no trace of the
#     predicted job itself: leave-one-out style), and each job also timed whole on this GPU.
# Every part has its own time limit and log; a failing part does not stop the others. The whole
# session stays under 6 minutes. Results (at most 8 files) in OUTDIR: session.log (the summary),
# parts.log (every part's output), bench.log, bench.json and bench_here.json (the scores),
# profiles.tar.gz (the profile tables), traces.tar.gz (the raw traces, when small enough).
# Run from the repository root; PYTHON (default python) is the interpreter.
# SMOKE=1 DEVICE=cpu runs the same plumbing on a tiny job on a CPU (a check of this script).
set -u
OUT=${1:?usage: bench/gpu_trace_session.sh OUTDIR}
PY=${PYTHON:-python}
DEVICE=${DEVICE:-cuda}
mkdir -p "$OUT/profiles"
OUT=$(cd "$OUT" && pwd)
J=data/measured/h100/jobs
START=$(date +%s)

log() { echo "[$(date +%T) +$(( $(date +%s) - START ))s] $*" | tee -a "$OUT/session.log"; }
part() {  # part NAME SECONDS command...
  local name=$1 limit=$2; shift 2
  log "start $name (limit ${limit}s)"
  echo "===== $name: $*" >> "$OUT/parts.log"
  timeout --kill-after=10 "$limit" "$@" >> "$OUT/parts.log" 2>&1
  log "end $name: exit $?"
}
trace() {  # trace NAME SECONDS STACK PROFILE MODELS [args...]
  local name=$1 limit=$2 stack=$3 profile=$4 models=$5; shift 5
  part "$name" "$limit" "$PY" -m vtrain_ml.profile trace --device "$DEVICE" --stack "$stack" \
    --models "$models" --layers 2 --micro-batches 2 --warmup 2 --repeats 3 --quiet --resume \
    --out "$OUT/profiles/$profile" "$@"
}

log "session in $OUT, device $DEVICE"
"$PY" -c "import sys, torch; print(sys.version.split()[0], torch.__version__, \
torch.cuda.get_device_name() if torch.cuda.is_available() else 'no cuda')" >> "$OUT/session.log" 2>&1
"$PY" -c "import transformers; print('transformers', transformers.__version__)" \
  >> "$OUT/session.log" 2>&1

if [ "${SMOKE:-0}" = 1 ]; then
  T=tests/data/traces/tiny_trace_gpt.yaml
  trace ref 120 reference reference "$T" --tp 1,2 --micro-batch 1,2 --recompute none,full --threads 1
  trace hf 120 huggingface huggingface tests/profiler_tests/tiny_llama.yaml --micro-batch 1 --threads 1
  printf 'job,iteration_ms,peak_memory_GiB,tag\n%s,50.0,0.1,mgpt\n%s,50.0,0.1,llama\n' \
    "$PWD/$T" "$PWD/tests/profiler_tests/tiny_llama.yaml" > "$OUT/runs.csv"
  RUNS="$OUT/runs.csv"
else
  M1=$J/mgpt_h1024_l24_s1024_mb1_ga4_full_unfused.yaml
  M2=$J/mgpt_h2048_l24_s2048_mb2_ga4_none_flash.yaml
  M4=$J/mgpt_h4096_l16_s2048_mb2_ga2_none_flash.yaml
  L2=$J/llama_h2048_l16_s2048_mb2_ga2_none_flash.yaml
  L4=$J/llama_h4096_l8_s2048_mb2_ga2_none_flash.yaml
  G1=$J/gpt2_h1024_l24_s1024_mb16_ga1_none_flash.yaml
  # most valuable first: every part keeps what it finished when its time is up
  trace ref 70 reference reference "$M2,$M4,$M1" --tp 1 --micro-batch 1,2,4 --recompute none,full
  trace ref-unfused 25 reference reference "$M2" --tp 1 --micro-batch 2 --recompute none --attention unfused
  trace hf 70 huggingface huggingface "$L2,$L4" --tp 1 --micro-batch 1,2,4 --recompute none,full
  trace hf-gpt2 25 huggingface huggingface "$G1" --tp 1 --micro-batch 4,16 --recompute none
  trace ref-tp 25 reference reference "$M4" --tp 2,4 --micro-batch 1 --recompute none --sequence-parallel both
  trace hf-tp 20 huggingface huggingface "$L4" --tp 2 --micro-batch 1 --recompute none
  RUNS=data/measured/h100/runs.csv
fi

log "scoring the fresh profiles"
PROFILES=("mgpt=$OUT/profiles/reference" "llama=$OUT/profiles/huggingface" "gpt2=$OUT/profiles/huggingface")
part bench 30 "$PY" bench/bench_traces.py --runs "$RUNS" --json "$OUT/bench.json" --profiles "${PROFILES[@]}"
if [ "${SMOKE:-0}" != 1 ]; then  # the 14 jobs measured one per process (other shapes)
  part bench-fresh 30 "$PY" bench/bench_traces.py --runs data/measured/h100/runs_fresh_process.csv \
    --json "$OUT/bench_fresh.json" --profiles "${PROFILES[@]}"
fi
# the same predictions against each whole job timed on this GPU (rows print as they finish)
part bench-here 70 "$PY" bench/bench_traces.py --runs "$RUNS" --measure-here \
  --json "$OUT/bench_here.json" --profiles "${PROFILES[@]}"
sed -n '/===== bench/,$p' "$OUT/parts.log" > "$OUT/bench.log"

# the profile tables in one file; the raw traces in another when they are not too big
tar czf "$OUT/profiles.tar.gz" -C "$OUT" --exclude=traces profiles
if [ "$(du -sm "$OUT/profiles" | cut -f1)" -lt 60 ]; then
  tar czf "$OUT/traces.tar.gz" -C "$OUT" profiles/reference/traces profiles/huggingface/traces 2>/dev/null
else
  log "raw traces too big to bring back; only the profile tables are kept"
fi
rm -rf "$OUT/profiles" "$OUT/runs.csv"
log "done: $(ls "$OUT" | tr '\n' ' ')"

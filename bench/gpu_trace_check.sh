#!/usr/bin/env bash
# One short GPU check (under 150 s) for the issue-10 follow-up (trace2). Three parts, each with
# its own time limit; a failing part does not stop the others:
#
#   bench/gpu_trace_check.sh OUTDIR
#
# 1. retrace (reference and Hugging Face stacks, 2-layer shards, 3 profiled iterations each): the
#    two shapes whose single traces stalled in the 2026-11-23 session (gpt2_h1024 micro-batch 4:
#    26.0 ms without the profiler, 68.6 ms traced; mgpt_h2048 micro-batch 2: 34.3 vs 55.6 ms),
#    plus gpt2_h1024 micro-batch 16 and mgpt_h4096 micro-batch 1, now with the vocabulary
#    unpadded as the measured runs had it (the 10-17% fidelity gap of the mgpt_/gpt2_ rows);
# 2. compare: whole jobs timed the way what_ran.py timed them, its own models beside our stacks
#    (bench/compare_what_ran.py): gpt2_h1024 mb16 and mgpt_h2048 mb1 (measured runs: 273.5 ms and
#    274.9 ms; the previous session's --measure-here gave 239.1 and 243.7 ms);
# 3. score: bench/bench_traces.py --profiles with the fresh profiles against runs.csv (CPU work).
#
# Results in OUTDIR: check.log (summary with timings), parts.log (all output), profiles.tar.gz
# (tables and raw traces). Run from the repository root; PYTHON (default python) is the
# interpreter. SMOKE=1 DEVICE=cpu runs the same plumbing on tiny jobs on a CPU.
set -u
OUT=${1:?usage: bench/gpu_trace_check.sh OUTDIR}
PY=${PYTHON:-python}
DEVICE=${DEVICE:-cuda}
mkdir -p "$OUT/profiles"
OUT=$(cd "$OUT" && pwd)
J=data/measured/h100/jobs
START=$(date +%s)

log() { echo "[$(date +%T) +$(( $(date +%s) - START ))s] $*" | tee -a "$OUT/check.log"; }
part() {  # part NAME SECONDS command...
  local name=$1 limit=$2; shift 2
  log "start $name (limit ${limit}s)"
  echo "===== $name: $*" >> "$OUT/parts.log"
  timeout --kill-after=5 "$limit" "$@" >> "$OUT/parts.log" 2>&1
  log "end $name: exit $?"
}
trace() {  # trace NAME SECONDS STACK PROFILE MODELS [args...]
  local name=$1 limit=$2 stack=$3 profile=$4 models=$5; shift 5
  part "$name" "$limit" "$PY" -m vtrain_ml.profile trace --device "$DEVICE" --stack "$stack" \
    --models "$models" --layers 2 --micro-batches 2 --warmup 2 --repeats 3 --quiet --resume \
    --out "$OUT/profiles/$profile" "$@"
}

log "check in $OUT, device $DEVICE, commit $(git rev-parse --short HEAD 2>/dev/null)"
if [ "${SMOKE:-0}" = 1 ]; then
  T=tests/data/traces/tiny_trace_gpt.yaml
  S="$OUT/smoke_jobs"; mkdir -p "$S"
  sed 's/name: tiny-trace-gpt/name: tiny-trace-gpt/' "$T" > "$S/mgpt_tiny.yaml"
  cp "$T" "$S/gpt2_tiny.yaml"
  trace retrace-ref 60 reference reference "$S/mgpt_tiny.yaml" --micro-batch 1,2 --threads 1
  trace retrace-hf 60 huggingface huggingface "$S/gpt2_tiny.yaml" --micro-batch 1 --threads 1
  part compare 60 "$PY" bench/compare_what_ran.py --device "$DEVICE" --iters 2 \
    --jobs "$S/gpt2_tiny.yaml" "$S/mgpt_tiny.yaml"
  printf 'job,iteration_ms,peak_memory_GiB,tag\n%s,50.0,0.1,mgpt\n%s,50.0,0.1,gpt2\n' \
    "$S/mgpt_tiny.yaml" "$S/gpt2_tiny.yaml" > "$OUT/runs.csv"
  RUNS="$OUT/runs.csv"
else
  M2=$J/mgpt_h2048_l24_s2048_mb2_ga4_none_flash.yaml
  M4=$J/mgpt_h4096_l16_s2048_mb2_ga2_none_flash.yaml
  G1=$J/gpt2_h1024_l24_s1024_mb16_ga1_none_flash.yaml
  trace retrace-ref 40 reference reference "$M2,$M4" --tp 1 --micro-batch 1,2 --recompute none
  trace retrace-hf 30 huggingface huggingface "$G1" --tp 1 --micro-batch 4,16 --recompute none
  part compare 45 "$PY" bench/compare_what_ran.py --device "$DEVICE" --iters 4 \
    --jobs "$J/gpt2_h1024_l24_s1024_mb16_ga1_none_flash.yaml" \
    "$J/mgpt_h2048_l24_s2048_mb1_ga4_none_flash.yaml"
  RUNS=data/measured/h100/runs.csv
fi
part score 20 "$PY" bench/bench_traces.py --runs "$RUNS" --profiles \
  "mgpt=$OUT/profiles/reference" "gpt2=$OUT/profiles/huggingface"
tar czf "$OUT/profiles.tar.gz" -C "$OUT" profiles
rm -rf "$OUT/profiles" "$OUT/runs.csv" "$OUT/smoke_jobs"
log "done: $(ls "$OUT" | tr '\n' ' ')"

#!/usr/bin/env bash
# The GPU check of the compiled update in one script, sized for a short lease (~12 min on an H100/H200):
#   1. bench_precision.py: ms per update of pixel Crafter at preset m, batch 16x64 (the paper grid's Crafter
#      run): float32 eager against the compiled update (train.compile=update, CUDA graphs), in float32 and
#      bf16; compile times reported;
#   2. the paper grid's Crafter run (pixels, preset m, train ratio 512) with the fastest mode of step 1, for a
#      fixed wall time: env steps/s, the projected hours per 1M env steps and the Crafter score reached.
#
#   OUT=results/gpu bash benchmarks/gpu_crafter.sh      # PYTHON, DEVICE, PRESET, BENCH_SECONDS, TRAIN_SECONDS
#
# Writes into $OUT: precision.json, run/ (eval.csv, metrics.csv, config.yaml), train.log, summary.txt.
# Each step has its own time limit, so a slow one cannot take the other's time; a step that hits its
# limit says so in summary.txt. benchmarks/gpu_report.py turns the outputs into a report.
set -u
OUT=${OUT:?set OUT to an output folder}
PY=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
PRESET=${PRESET:-m}
BENCH_SECONDS=${BENCH_SECONDS:-300}
TRAIN_SECONDS=${TRAIN_SECONDS:-300}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
summary="$OUT/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }

note "== update: float32 eager vs compiled update ($DEVICE, pixel Crafter, preset $PRESET, limit ${BENCH_SECONDS}s)"
timeout "$BENCH_SECONDS" "$PY" benchmarks/bench_precision.py --device "$DEVICE" --preset "$PRESET" \
    --modes fp32 fp32+update bf16+update --repeats 20 --json "$OUT/precision.json" 2>&1 | tee -a "$summary"
note "benchmark exit ${PIPESTATUS[0]} (124 = it did not finish within ${BENCH_SECONDS}s)"

read -r precision compile < <("$PY" - "$OUT/precision.json" <<'EOF'
import json, sys
modes = {"fp32": "float32 off", "fp32+update": "float32 update", "bf16+update": "bfloat16 update"}
try:
    rows = json.load(open(sys.argv[1]))["rows"]
    print(modes[min(rows, key=lambda r: r["ms"])["mode"]])
except (OSError, KeyError, ValueError):
    print("float32 off")
EOF
)
note "== training: pixel Crafter, preset $PRESET, train ratio 512, $precision, compile $compile, ${TRAIN_SECONDS}s"
start=$(date +%s)
timeout "$TRAIN_SECONDS" "$PY" -m lore.cli train --run-dir "$OUT/run" --ablation full --seed 0 --no-progress \
    --set env.name=crafter --set env.obs=pixels --set model.preset="$PRESET" --set train.train_ratio=512 \
    --set device="$DEVICE" --set train.precision="$precision" --set train.compile="$compile" \
    --set train.steps=1000000 --set train.log_every=250 --set eval.every=2500 --set eval.episodes=4 \
    --set train.tensorboard=false --set train.checkpoint_every=1000000 >"$OUT/train.log" 2>&1
rc=$?
note "training exit $rc after $(( $(date +%s) - start ))s (124 = stopped at its time limit, as planned)"
tail -5 "$OUT/train.log" >>"$summary"
"$PY" - "$OUT/run" <<'EOF' | tee -a "$summary"
import csv, sys
from pathlib import Path
run = Path(sys.argv[1])
for name in ("metrics.csv", "eval.csv"):
    path = run / name
    if not path.exists():
        print(f"{name}: missing")
        continue
    rows = list(csv.DictReader(path.open()))
    if not rows:
        print(f"{name}: empty")
        continue
    last = rows[-1]
    keys = [k for k in ("env_step", "updates", "steps_per_s", "update_time_frac", "return_mean",
                        "crafter_score") if k in last]
    print(f"{name}: {len(rows)} rows; last: " + ", ".join(f"{k}={last[k]}" for k in keys))
    if name == "metrics.csv" and last.get("steps_per_s"):
        print(f"projected hours per 1M env steps: {1e6 / float(last['steps_per_s']) / 3600:.1f}")
    if name == "eval.csv":
        for row in rows:
            print("  eval " + ", ".join(f"{k}={row[k]}" for k in keys))
EOF

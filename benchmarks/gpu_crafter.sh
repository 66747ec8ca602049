#!/usr/bin/env bash
# The GPU checks of issues 10 and 13 in one script, sized for a short lease (~7 min on an H100/H200):
#   1. bench_precision.py: ms per update of pixel Crafter at preset m (the paper grid's Crafter run),
#      float32 eager vs bf16 autocast, then vs torch.compile (compile time reported);
#   2. the paper grid's Crafter run (pixels, preset m, train ratio 512) trained for a fixed wall time,
#      with the faster precision of step 1: env steps/s and the Crafter score of its evaluations.
#
#   OUT=results/gpu bash benchmarks/gpu_crafter.sh            # PYTHON, TRAIN_SECONDS, COMPILE_SECONDS override
#
# Writes into $OUT: precision_eager.json, precision_compile.json, run/ (the training run: eval.csv,
# metrics.csv, config.yaml), summary.txt. Each step has its own time limit, so a slow one cannot take
# the others' time; a step that hits its limit says so in summary.txt.
set -u
OUT=${OUT:?set OUT to an output folder}
PY=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
PRESET=${PRESET:-m}
TRAIN_SECONDS=${TRAIN_SECONDS:-180}
COMPILE_SECONDS=${COMPILE_SECONDS:-150}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
summary="$OUT/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }

note "== eager: float32 vs bf16 ($DEVICE, pixel Crafter, preset $PRESET)"
timeout 120 "$PY" benchmarks/bench_precision.py --device "$DEVICE" --preset "$PRESET" --modes fp32 bf16 \
    --repeats 10 --json "$OUT/precision_eager.json" 2>&1 | tee -a "$summary"

precision=$("$PY" - "$OUT/precision_eager.json" <<'EOF'
import json, sys
try:
    rows = {r["mode"]: r for r in json.load(open(sys.argv[1]))["rows"]}
    print("bfloat16" if rows["bf16"]["ratio"] < 0.95 else "float32")
except (OSError, KeyError, ValueError):
    print("float32")
EOF
)
note "== training: pixel Crafter, preset $PRESET, train ratio 512, $precision, ${TRAIN_SECONDS}s of wall time"
start=$(date +%s)
timeout "$TRAIN_SECONDS" "$PY" -m lore.cli train --run-dir "$OUT/run" --ablation full --seed 0 --no-progress \
    --set env.name=crafter --set env.obs=pixels --set model.preset="$PRESET" --set train.train_ratio=512 \
    --set device="$DEVICE" --set train.precision="$precision" --set train.steps=100000 \
    --set train.log_every=250 --set eval.every=1000 --set eval.episodes=4 --set train.tensorboard=false \
    --set train.checkpoint_every=100000 >"$OUT/train.log" 2>&1
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
    if name == "eval.csv":
        for row in rows:
            print("  eval " + ", ".join(f"{k}={row[k]}" for k in keys))
EOF

note "== compile: float32 eager vs torch.compile (limit ${COMPILE_SECONDS}s)"
timeout "$COMPILE_SECONDS" "$PY" benchmarks/bench_precision.py --device "$DEVICE" --preset "$PRESET" \
    --modes fp32 fp32+compile bf16+compile --repeats 10 --json "$OUT/precision_compile.json" 2>&1 | tee -a "$summary"
note "compile step exit ${PIPESTATUS[0]} (124 = it did not finish within ${COMPILE_SECONDS}s)"

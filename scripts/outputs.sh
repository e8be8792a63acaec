#!/usr/bin/env bash
# Writes the outputs a refactoring must leave byte-identical into OUT, one folder per
# run, so that two builds can be compared with `diff -r`:
#
#   scripts/outputs.sh target/release/apiary /tmp/before        # on the old commit
#   scripts/outputs.sh target/release/apiary /tmp/after         # on the new one
#   diff -r /tmp/before /tmp/after
#
# Every policy on the committed Philly sample under both drivers, the artifact-quirk,
# speed-model and mode variants, the peers' traces, Pollux workload 6, the LLM serving
# runs, a sweep and the HiveD replay. `--full` adds the 1 M-job synthetic trace.
# Runs that need ../shared are skipped without it. Each run's stdout, stderr (timing
# lines removed) and exit status are kept beside its files.
set -uo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 APIARY_BINARY OUT_DIR [--full]" >&2
  exit 2
fi
BIN=$(realpath "$1")
OUT=$2
FULL=${3:-}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SHARED=$ROOT/../shared
mkdir -p "$OUT"
OUT=$(realpath "$OUT")
# The binary is called as `apiary` from PATH, so argv[0] in the records is the same
# for any build.
BINDIR=$(mktemp -d)
ln -s "$BIN" "$BINDIR/apiary"
export PATH="$BINDIR:$PATH"
cd "$ROOT"

# run NAME ARGS...: runs `apiary ARGS` with `-o OUT/NAME` where ARGS holds `@OUT`.
run() {
  local name=$1
  shift
  local args=()
  for a in "$@"; do args+=("${a//@OUT/$OUT/$name}"); done
  mkdir -p "$OUT/$name"
  apiary "${args[@]}" > "$OUT/$name/stdout" 2> "$OUT/$name/stderr.raw"
  echo $? > "$OUT/$name/status"
  # Wall-clock figures differ between any two runs.
  grep -v -E '(events/s|in [0-9.]+ ?(ms|s)\b|elapsed|took|wall)' "$OUT/$name/stderr.raw" > "$OUT/$name/stderr"
  rm -f "$OUT/$name/stderr.raw"
  # The records and messages name the output folder, which differs between the trees.
  find "$OUT/$name" -type f \( -name '*.json' -o -name '*.html' -o -name 'std*' \) \
    -exec sed -i "s#$OUT#OUT#g" {} +
}

SAMPLE=testdata/traces/philly-sample.csv
POLICIES=$(apiary policies | awk '/^[a-z]/ {print $1}')
for p in $POLICIES; do
  run "sim-$p" simulate -q -p "$p" -o @OUT
  run "live-$p" simulate -q -p "$p" --driver live -o @OUT
done
run sim-tiresias-gittins-param simulate -q -p tiresias --set gittins=true -o @OUT
run sim-slot60 simulate -q -p tiresias --mode slot:60 -o @OUT
run sim-fifo-slot300 simulate -q -p fifo --set backfill=true --mode slot:300 -o @OUT
run sim-restart simulate -q -p srtf --restart-overhead 10 -o @OUT
run sim-random simulate -q -p tiresias --set placement=random --seed 3 -o @OUT
run sim-bestfit simulate -q -p srsf --set placement=best-fit -o @OUT
run sim-comm-topology simulate -q -p tiresias -c n64g8-A100 --speed comm --set placement=topology -o @OUT
run sim-comm simulate -q -p fifo -c n64g8-A100 --speed comm -o @OUT
run compare-readme compare -q -p fifo,srtf,tiresias -o @OUT
run compare-tenants compare -q -p private,quota,hived -c n48g8 -o @OUT
run hived-gittins simulate -q -p hived --set intra=tiresias-gittins -o @OUT
run quota-srtf simulate -q -p quota --set intra=srtf -o @OUT
run pollux-6 simulate -q -t testdata/traces/pollux-workload-6.csv -c n16g4 -p pollux -o @OUT
run tiresias-pollux-6 simulate -q -t testdata/traces/pollux-workload-6.csv -c n16g4 -p tiresias -o @OUT
run sweep-load sweep run testdata/sweeps/philly-load.toml -o @OUT
run hived-replay hived replay testdata/hived/design-normal.txt
run hived-reconfig hived replay testdata/hived/design-reconfig.txt
run policies policies
run llm-policies llm policies
run llm-default llm simulate
run llm-pool llm pool
run llm-simulate-sample llm simulate -t sample:code -p infaas++ --json
run llm-compare llm compare -t powerlaw:M-M --rate 7.6 --model llama-7b --max-len 12288 \
  -p round-robin,infaas++,llumnix --set llumnix.migrate_threshold=10 -n 2000 -o @OUT
run comm-plan comm plan -t dgx-a100:2

if [ -d "$SHARED/traces" ]; then
  MURI=$SHARED/traces/peers/muri/cluster_exp/cluster_trace.csv
  for p in srtf srsf tiresias themis antman muri-s muri-l; do
    run "muri-$p" simulate -q -t "$MURI" -c n8g8 -p "$p" --per-event-overhead --percentile floor -o @OUT
  done
  GAVEL=$SHARED/traces/peers/gavel/physical_cluster
  run gavel-mmf simulate -q -t "$GAVEL/max_min_fairness.trace" -c testdata/clusters/gavel-physical.toml -p gavel -o @OUT
  run gavel-agnostic simulate -q -t "$GAVEL/max_min_fairness.trace" -c testdata/clusters/gavel-physical.toml -p gavel --set perf=false -o @OUT
  run gavel-makespan simulate -q -t "$GAVEL/minimize_makespan.trace" -c testdata/clusters/gavel-physical.toml -p gavel-makespan -o @OUT
  EF=$SHARED/traces/itp/elasticflow/cluster10.csv
  run ef-compare compare -q -t "$EF" -c n32g8 -p elasticflow,edf,tiresias,gandiva -o @OUT
  run ef-artifact simulate -q -t "$EF" -c n32g8 -p elasticflow --set progress=artifact -o @OUT
  run ef-noadmission simulate -q -t "$EF" -c n32g8 -p elasticflow --set admission=false -o @OUT
  run edf-admission simulate -q -t "$EF" -c n32g8 -p edf --set admission=true -o @OUT
  run gandiva-ef simulate -q -t "$EF" -c n32g8 -p gandiva --set clock=elasticflow -o @OUT
  run tenants-msr compare -q -t "$SHARED/traces/philly/gavel_msr_seed0" -c philly -p private,quota,hived --set intra=fifo -o @OUT
  PHILLY=$SHARED/traces/philly/philly.csv
  for p in fifo srtf tiresias; do
    run "philly-$p" simulate -q -t "$PHILLY" -c philly -p "$p" -o @OUT
  done
  run philly-gavel-speed simulate -q -t "$PHILLY" -c philly -p tiresias --speed gavel -o @OUT
  run philly-pollux-speed simulate -q -t "$PHILLY" -c philly -p srtf --speed pollux -o @OUT
  run llm-mooncake llm compare -t "$SHARED/llm/traces/mooncake_synthetic_trace.jsonl" --model mistral-7b-v0.1 --gpu A100 \
    -p infaas++,prefix-aware --prefix-cache -o @OUT
fi

if [ "$FULL" = "--full" ]; then
  SYNTH=$OUT/synth-1m.csv
  apiary trace synth --jobs 1000000 --gpus 10000 --seed 1 -o "$SYNTH" > /dev/null 2>&1
  for p in srtf tiresias; do
    run "synth-$p" simulate -q -t "$SYNTH" -c n1250g8 -p "$p" -o @OUT
    # The million rows of jobs.csv are kept as a digest.
    sha256sum < "$OUT/synth-$p/jobs.csv" > "$OUT/synth-$p/jobs.csv.sha256"
    rm "$OUT/synth-$p/jobs.csv"
  done
  sha256sum < "$SYNTH" > "$SYNTH.sha256"
  rm "$SYNTH"
fi
rm -rf "$BINDIR"
echo "wrote $(find "$OUT" -type f | wc -l) files under $OUT"

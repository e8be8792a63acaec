#!/usr/bin/env bash
# Runs every command the README shows, as a newcomer would type it, and fails on the
# first that fails. `apiary` is the binary given (a release build); `cargo run` and
# `cargo install` commands run as written (install into a scratch root, reusing the
# build). Commands run in a scratch folder laid out like a checkout: `testdata/` and
# `../shared/` are the real ones (`examples/` too), and the README's placeholder `trace.csv` is a
# committed sample. Each must exit 0 and print something; its output is kept in the
# log folder for a look afterwards.
#
#   scripts/readme-commands.sh target/release/apiary [README.md ...]
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
shift
DOCS=("$@")
[ ${#DOCS[@]} -eq 0 ] && DOCS=("$ROOT/README.md")
SHARED=$(cd "$ROOT/.." && pwd)/shared
WORK=$(mktemp -d)
mkdir -p "$WORK/checkout" "$WORK/bin" "$WORK/logs"
ln -s "$ROOT/testdata" "$WORK/checkout/testdata"
ln -s "$ROOT/examples" "$WORK/checkout/examples"
[ -d "$SHARED" ] && ln -s "$SHARED" "$WORK/shared"
cp "$ROOT/testdata/traces/philly-sample.csv" "$WORK/checkout/trace.csv"
ln -s "$BIN" "$WORK/bin/apiary"
export PATH="$WORK/bin:$PATH"

# Fenced ```sh blocks, continuation lines joined, trailing comments dropped.
commands() {
  awk '
    /^```sh/ { inside = 1; next }
    /^```/ { inside = 0; next }
    inside {
      line = $0
      if (cont != "") { sub(/^[ \t]+/, "", line); line = cont " " line }
      if (line ~ /\\[ \t]*$/) { sub(/\\[ \t]*$/, "", line); cont = line; next }
      cont = ""
      sub(/[ \t]+#.*$/, "", line)
      if (line ~ /^[ \t]*$/) next
      print line
    }' "$1"
}

n=0 fail=0
for doc in "${DOCS[@]}"; do
  while IFS= read -r cmd; do
    n=$((n + 1))
    log="$WORK/logs/$n.txt"
    case "$cmd" in
      "cargo test"*)
        echo "skip  $cmd   (the test suite is CI's first step)"; continue ;;
      "cargo install"*)
        run=(bash -c "cd '$ROOT' && CARGO_TARGET_DIR='${CARGO_TARGET_DIR:-$ROOT/target}' ${cmd} --root '$WORK/install'") ;;
      "cargo "*)
        run=(bash -c "cd '$ROOT' && $cmd") ;;
      *sbatch*)
        echo "skip  $cmd   (needs a Slurm cluster: scripts/slurm-sweep-test.sh runs one)"; continue ;;
      *apiary*)
        run=(bash -c "cd '$WORK/checkout' && $cmd") ;;
      *)
        echo "skip  $cmd   (not an apiary or cargo command)"; continue ;;
    esac
    t0=$(date +%s%N)
    "${run[@]}" > "$log" 2>&1 < /dev/null
    rc=$?
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    t="$((ms / 1000)).$(( (ms % 1000) / 100 ))"
    # Success: exit 0 and something printed, or written where the command redirects.
    out="$log"
    case "$cmd" in
      *" > "*) out="$WORK/checkout/${cmd##* > }" ;;
    esac
    if [ $rc -ne 0 ] || [ ! -s "$out" ]; then
      printf 'FAIL  %s   (exit %d, %s s)\n' "$cmd" "$rc" "$t"
      tail -n 5 "$log" | sed 's/^/      /'
      fail=$((fail + 1))
    else
      printf 'ok    %s   (%s s)\n' "$cmd" "$t"
    fi
  done < <(commands "$doc")
done
echo "$n commands, $fail failed; logs in $WORK/logs"
[ $fail -eq 0 ]

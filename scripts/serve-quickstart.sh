#!/usr/bin/env bash
# Runs docs/serve.md's quick start as written: the server and two agents in the
# background, then every client command, each of which must exit 0. The Python scripts
# it submits are stand-ins (a `python` on PATH that runs them as shell: train.py runs
# for a minute, the others print and exit 0), so no Python is needed. Afterwards the
# jobs must have ended as the block's comments say.
#
#   scripts/serve-quickstart.sh target/release/apiary
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
WORK=$(mktemp -d)
cd "$WORK"
mkdir bin
ln -s "$BIN" bin/apiary
printf '#!/bin/sh\nexec sh "$@"\n' > bin/python
chmod +x bin/python
export PATH="$WORK/bin:$PATH"
printf 'echo "epoch 1"\nsleep 60\necho done\n' > train.py
for f in serve eval sweep check; do printf 'echo "%s ok"\n' "$f" > $f.py; done

# The quick start's first fenced block.
awk '/^## Quick start/ { f = 1 } f && /^```/ { if (b) exit; b = 1; next } b' \
  "$ROOT/docs/serve.md" > quickstart.sh
[ -s quickstart.sh ] || { echo "no quick start block in docs/serve.md" >&2; exit 1; }

cleanup() { kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT
# Each line runs as typed; after one that starts something in the background, wait
# until it is up, as a person would before typing the next.
step=0
heredoc=""
while IFS= read -r line; do
  if [ -n "$heredoc" ]; then
    printf '%s\n' "$line" >> "$heredoc_file"
    [ "$line" = "$heredoc" ] && { bash "$heredoc_file"; heredoc=""; }
    continue
  fi
  case "$line" in
    *"<<'"*)
      heredoc=$(printf '%s' "$line" | sed "s/.*<<'\([A-Z]*\)'.*/\1/")
      heredoc_file="$WORK/heredoc-$step.sh"
      printf '%s\n' "$line" > "$heredoc_file"
      continue ;;
  esac
  cmd=$(printf '%s' "$line" | sed -e 's/[ \t]#.*$//' -e 's/[ \t]*$//')
  [ -z "${cmd// }" ] && continue
  step=$((step + 1))
  echo "\$ $cmd"
  case "$cmd" in
    *"&")
      eval "${cmd%&} > bg-$step.log 2>&1 &"
      for _ in $(seq 50); do apiary nodes > /dev/null 2>&1 && break; sleep 0.2; done
      sleep 1 ;;
    *)
      if ! eval "$cmd"; then
        echo "FAILED: $cmd" >&2
        tail -n 20 bg-*.log >&2 || true
        exit 1
      fi ;;
  esac
done < quickstart.sh

# What the comments promise.
apiary jobs -a > final.txt
cat final.txt
want() { # job, state
  grep -Eq "^ *$1 .* $2 " final.txt || { echo "job $1 is not $2" >&2; exit 1; }
}
want 1 cancelled
want 2 succeeded
want 3 cancelled
want 14 succeeded
echo "the quick start ran: $step commands"

#!/usr/bin/env bash
# Runs docs/serve.md's "Quick start: two replicas on one machine" as written: etcd, two
# servers, an agent and the client, the leader killed mid-job. Each line must exit 0;
# afterwards job 1 must have succeeded in its first attempt, and the second server lead.
# Needs `etcd` on PATH and an apiary built with --features etcd.
#
#   scripts/etcd-quickstart.sh target/release/apiary
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
WORK=$(mktemp -d)
cd "$WORK"
mkdir bin
ln -s "$BIN" bin/apiary
export PATH="$WORK/bin:$PATH"

awk '/^### Quick start: two replicas/ { f = 1 } f && /^```/ { if (b) exit; b = 1; next } b' \
  "$ROOT/docs/serve.md" > quickstart.sh
[ -s quickstart.sh ] || { echo "no replicas quick start in docs/serve.md" >&2; exit 1; }

cleanup() {
  kill -9 $(jobs -p) 2>/dev/null || true
  wait 2>/dev/null || true
}
trap cleanup EXIT
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
      # Started in the background: give it the moment a person would.
      eval "${cmd%&} > bg-$step.log 2>&1 &"
      sleep 2 ;;
    *)
      if ! eval "$cmd"; then
        echo "FAILED: $cmd" >&2
        tail -n 20 bg-*.log >&2 || true
        exit 1
      fi ;;
  esac
done < quickstart.sh

# What the comments promise.
for _ in $(seq 60); do
  apiary job 1 -o json > job1.json 2>/dev/null || true
  grep -q '"state": *"succeeded"' job1.json && break
  sleep 1
done
cat job1.json
grep -q '"state": *"succeeded"' job1.json || { echo "job 1 did not succeed" >&2; exit 1; }
grep -q '"attempt": *1[,}]' job1.json || { echo "job 1 ran more than once" >&2; exit 1; }
# A follower answers 503, which the client reports as an error.
APIARY_SERVER=http://127.0.0.1:8801 apiary jobs > /dev/null || { echo "the second server does not lead" >&2; exit 1; }
echo "the replicas quick start ran: $step commands"

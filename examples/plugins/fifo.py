#!/usr/bin/env python3
"""FIFO as an apiary plugin: protocol 1, JSON lines on stdin and stdout (docs/plugins.md).

It reproduces the built-in `fifo` (no backfill, consolidated placement) job for job:
walk the pending jobs in arrival order and start each while the free GPUs allow; the
first one that cannot start blocks those behind it. Run it with
    apiary simulate -p "plugin:cmd=python3 examples/plugins/fifo.py"
Standard library only.
"""
import bisect
import json
import sys


def main():
    out = sys.stdout
    pending = []  # job indices, ascending: arrival order
    gpus = {}  # job index -> GPUs it asks for
    for line in sys.stdin:
        msg = json.loads(line)
        kind = msg["type"]
        if kind == "hello":
            # FIFO keeps its own account, so it asks for no optional part of the view.
            hello = {"type": "hello", "protocol": 1, "name": "fifo.py", "view": []}
            out.write(json.dumps(hello) + "\n")
            out.flush()
        elif kind == "arrive":
            job = msg["job"]
            gpus[job["idx"]] = job["gpus"]
            bisect.insort(pending, job["idx"])
        elif kind == "requeue":
            # Back in its arrival-order place (the live service retries a failed job).
            bisect.insort(pending, msg["idx"])
        elif kind == "finish":
            del gpus[msg["idx"]]
        elif kind == "schedule":
            free = msg["free_gpus"]
            actions = []
            for j in pending:
                if gpus[j] > free:
                    break
                free -= gpus[j]
                actions.append({"start": j})
            # "stop": a start that finds no GPUs (fragmentation) blocks the rest too.
            out.write(json.dumps({"type": "decide", "actions": actions, "on_fail": "stop"}) + "\n")
            out.flush()
        elif kind == "result":
            started = set(msg["started"])
            if started:
                pending = [j for j in pending if j not in started]


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Discretised least-attained-service as an apiary plugin (protocol 1, docs/plugins.md).

A sketch of Tiresias' idea in 60 lines: jobs fall into queues by the GPU-time they
have had (below 1 GPU-hour, below 10, the rest), earlier queues first and arrival order
within a queue; each pass counts GPUs over the whole cluster in that order, preempts the
running jobs that no longer fit and starts the pending ones that do. It reads the
`running` part of the view for each job's attained service, and asks to be woken every
5 minutes so that demotions take effect. Run it with
    apiary simulate -p "plugin:cmd=python3 examples/plugins/las.py"
Standard library only.
"""
import json
import sys

THRESHOLDS_MS = [1 * 3600 * 1000, 10 * 3600 * 1000]  # GPU-ms
WAKE_MS = 5 * 60 * 1000


def queue(attained):
    return sum(1 for t in THRESHOLDS_MS if attained >= t)


def main():
    out = sys.stdout
    gpus = {}  # unfinished job -> GPUs
    attained = {}  # unfinished job -> GPU-ms as last seen
    running = set()
    for line in sys.stdin:
        msg = json.loads(line)
        kind = msg["type"]
        if kind == "hello":
            out.write(json.dumps({"type": "hello", "protocol": 1, "name": "las.py"}) + "\n")
            out.flush()
        elif kind == "arrive":
            j = msg["job"]["idx"]
            gpus[j] = msg["job"]["gpus"]
            attained[j] = 0
        elif kind == "finish":
            j = msg["idx"]
            del gpus[j], attained[j]
            running.discard(j)
        elif kind == "requeue":
            running.discard(msg["idx"])
        elif kind == "schedule":
            running = set()
            for r in msg["running"]:
                attained[r["idx"]] = r["attained"]
                running.add(r["idx"])
            cap = msg["total_gpus"]
            preempt, start = [], []
            for j in sorted(gpus, key=lambda j: (queue(attained[j]), j)):
                if gpus[j] <= cap:
                    cap -= gpus[j]
                    if j not in running:
                        start.append(j)
                elif j in running:
                    preempt.append(j)
            actions = [{"preempt": j} for j in preempt] + [{"start": j} for j in start]
            decide = {"type": "decide", "actions": actions, "on_fail": "continue"}
            if running or start:
                decide["wake_at"] = msg["now"] + WAKE_MS
            out.write(json.dumps(decide) + "\n")
            out.flush()
        elif kind == "result":
            running.difference_update(msg["preempted"])
            running.update(msg["started"])


if __name__ == "__main__":
    main()

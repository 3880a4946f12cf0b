"""Writes a broken copy of a plan file for the `bmc report` error tests.

usage: edit_plan.py IN OUT WHAT, WHAT one of
  version     schema_version 2
  step        the step time doubled (the items no longer add up to it)
  item        one step item's seconds doubled
  memory      the worst stage's parameters doubled
  log-other   OUT is a trainer log of another plan (a step of half the tokens)
  log-good    OUT is a trainer log of this plan (three steps)
  old         without the keys added for bmc report (a plan written before)
"""
import json
import sys

src, dst, what = sys.argv[1:4]
with open(src) as f:
    plan = json.load(f)


def log(tokens_per_rank):
    lines = []
    for step in range(1, 4):
        seconds = 0.5 + 0.01 * step
        lines.append(json.dumps({
            "step": step, "loss": 5.0 - step, "lr": 1e-4, "grad_norm": 1.0,
            "step_time_s": seconds, "tokens_per_s": tokens_per_rank / seconds,
            "compute_time_s": seconds - 0.1, "bubble_time_s": 0.0,
            "communication_time_s": {"dp": 0.04, "tp": 0.06},
            "peak_memory_bytes": {"total": 123456789}}))
    return "\n".join(lines) + "\n"


tokens = plan["global_batch"] / plan["config"]["dp"] * plan["sequence_length"]
if what == "version":
    plan["schema_version"] = 2
elif what == "step":
    plan["time"]["step_seconds"] *= 2
elif what == "item":
    critical = plan["critical_stage"]
    item = next(i for i in plan["items"]
                if i["stage"] == critical and not i["after_pipeline"])
    item["seconds"] *= 2
elif what == "memory":
    plan["memory"]["params"] *= 2
elif what == "old":
    for key in ("critical_stage", "tail_stage", "items", "stage_memory", "timeline"):
        del plan[key]
    for alternative in plan["alternatives"]:
        del alternative["time"]
elif what in ("log-other", "log-good"):
    with open(dst, "w") as f:
        f.write(log(tokens / 2 if what == "log-other" else tokens))
    sys.exit(0)
else:
    sys.exit("unknown edit " + what)
with open(dst, "w") as f:
    json.dump(plan, f)

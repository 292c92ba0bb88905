"""--profile N: a torch.profiler trace of N training steps (machinery; no paper section).

The trace opens in chrome://tracing or ui.perfetto.dev; the table printed beside it lists the
operations that took the most time (on a GPU their device time, on a CPU their CPU time), and
out/profile_top.json keeps the top 20 with each one's share of the profiled steps' time.

The profiled steps start after WAIT steps: the first steps compile the step, and on a GPU the
compiled step records its CUDA graph at the second (the regional step at the third), so the steps profiled are the replays a
run spends its time in, not the setup (and no graph is recorded under the profiler).
"""
import json

import torch

WAIT = 8


def start_profile(n, out, device):
    """A started torch.profiler for --profile N (.step() after every step). After WAIT + 1 + N
    steps it writes out/profile_trace.json and out/profile_top.json and prints the operations
    that took the most time."""
    gpu = device.type == "cuda"

    def report(prof):
        path = out / "profile_trace.json"
        prof.export_chrome_trace(str(path))
        key = "self_device_time_total" if gpu else "self_cpu_time_total"
        events = prof.key_averages()
        print(events.table(sort_by=key, row_limit=20))
        # self times add up to the time of the profiled steps: each top operation's share
        total = sum(getattr(e, key) for e in events) or 1
        top = sorted(events, key=lambda e: getattr(e, key), reverse=True)[:20]
        rows = [dict(name=e.key, calls=e.count, self_us=getattr(e, key),
                     share=getattr(e, key) / total) for e in top]
        (out / "profile_top.json").write_text(json.dumps(dict(
            steps=n, device=str(device), time=key, total_us=total,
            per_step_ms=total / n / 1000, top=rows), indent=1))
        print(f"profile of {n} steps written to {path}; the top 20 operations' shares in "
              f"{out / 'profile_top.json'}: " + ", ".join(
                  f"{r['name'][:40]} {100 * r['share']:.1f} %" for r in rows[:5]), flush=True)
    activities = [torch.profiler.ProfilerActivity.CPU] + \
        ([torch.profiler.ProfilerActivity.CUDA] if gpu else [])
    prof = torch.profiler.profile(activities=activities, on_trace_ready=report,
                                  schedule=torch.profiler.schedule(wait=WAIT, warmup=1, active=n,
                                                                   repeat=1))
    prof.start()
    return prof

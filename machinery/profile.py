"""--profile N: a torch.profiler trace of N training steps (machinery; no paper section).

The trace opens in chrome://tracing or ui.perfetto.dev; the table printed beside it lists the
operations that took the most time (on a GPU their device time, on a CPU their CPU time).
"""
import torch


def start_profile(n, out, device):
    """A started torch.profiler for --profile N (.step() after every step). After 2 + N steps
    it writes out/profile_trace.json and prints the operations that took the most time."""
    gpu = device.type == "cuda"

    def report(prof):
        path = out / "profile_trace.json"
        prof.export_chrome_trace(str(path))
        key = "self_device_time_total" if gpu else "self_cpu_time_total"
        print(prof.key_averages().table(sort_by=key, row_limit=20))
        print(f"profile of {n} steps written to {path}", flush=True)
    activities = [torch.profiler.ProfilerActivity.CPU] + \
        ([torch.profiler.ProfilerActivity.CUDA] if gpu else [])
    prof = torch.profiler.profile(activities=activities, on_trace_ready=report,
                                  schedule=torch.profiler.schedule(wait=1, warmup=1, active=n,
                                                                   repeat=1))
    prof.start()
    return prof

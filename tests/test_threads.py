"""machinery/threads.py: a CPU run times a few steps at each thread count and keeps the fastest,
and times them again later. Judged with a stand-in clock - which count is faster is what the
test says, never what this machine measures - and once through the training loop."""
import types

import pytest
import torch

import electra_small
from machinery import threads
from machinery.threads import ThreadChooser, candidates


class FakeClock:
    """Each step takes `cost[threads]` seconds at the thread count torch has now."""

    def __init__(self, cost):
        self.t, self.cost = 0.0, cost

    def __call__(self):
        return self.t

    def step(self, chooser):
        self.t += self.cost[torch.get_num_threads()]
        chooser.after_step()


@pytest.fixture
def restore_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def run(cost, steps, every=20, probe_steps=3, n=2):
    clock, lines = FakeClock(cost), []
    c = ThreadChooser(n, say=lambda *a, **k: lines.append(a[0]), probe_steps=probe_steps,
                      every=every, clock=clock)
    seen = []
    for _ in range(steps):
        clock.step(c)
        seen.append(torch.get_num_threads())
    return c, lines, seen


def test_candidates_halve_down_to_one():
    assert candidates(1) == [1] and candidates(2) == [2, 1] and candidates(12) == [12, 6, 3, 1]


@pytest.mark.parametrize("cost, best", [({1: 0.030, 2: 0.020}, 2),     # idle: two threads win
                                        ({1: 0.030, 2: 0.080}, 1)])    # busy: one thread wins
def test_the_faster_count_is_kept(cost, best, restore_threads):
    c, lines, seen = run(cost, 20)
    assert c.chosen == best and len(lines) == 1 and lines[0].startswith(f"threads: {best} ")
    # after 2 steps, a probe: 3 + 1 steps at 2 threads (the count in use), then 1 thread -
    # all 4 steps if it is faster, dropped after 3 if it is a quarter slower - then the best
    # (seen: the count set after each step)
    assert seen[1:5] == [2] * 4
    n1 = 4 if best == 1 else 3
    assert seen[5:5 + n1] == [1] * n1 and seen[5 + n1:] == [best] * (15 - n1)


def test_a_machine_that_gets_busy_is_noticed_at_the_next_probe(restore_threads):
    clock, lines = FakeClock({1: 0.030, 2: 0.020}), []
    c = ThreadChooser(2, say=lambda *a, **k: lines.append(a[0]), probe_steps=3, every=20,
                      clock=clock)
    for _ in range(15):
        clock.step(c)
    assert c.chosen == 2
    clock.cost = {1: 0.030, 2: 0.090}                  # a second job starts
    for _ in range(40):
        clock.step(c)
    assert c.chosen == 1 and torch.get_num_threads() == 1 and len(lines) == 2
    assert len(c.history) >= 2 and c.history[-1][2] > c.history[-1][1]


@pytest.mark.parametrize("before, after, best", [
    ({1: 0.030, 2: 0.020}, {1: 0.030, 2: 0.090}, 1),       # a second job starts
    ({1: 0.030, 2: 0.090}, {1: 0.015, 2: 0.010}, 2)])      # ... and stops
def test_a_machine_that_changes_is_timed_again_before_the_next_probe_is_due(
        before, after, best, restore_threads):
    """Steps 1.5x slower (or faster) than the last probe timed start a probe at once: with
    probes due every 1,000 steps the change is noticed within a window of 20 steps."""
    clock, lines = FakeClock(before), []
    c = ThreadChooser(2, say=lambda *a, **k: lines.append(a[0]), probe_steps=3, every=1000,
                      clock=clock, window=20)
    for _ in range(30):
        clock.step(c)
    assert c.chosen != best and len(c.history) == 1
    clock.cost = after
    for _ in range(20 + 10):                           # a window, then a probe
        clock.step(c)
    assert c.chosen == best and torch.get_num_threads() == best and len(c.history) == 2
    assert len(lines) == 2 and lines[1].startswith(f"threads: {best} ")


def test_a_choice_that_holds_is_timed_less_often_and_slow_counts_cost_few_steps(
        restore_threads):
    """On a busy machine (2 threads 8x slower) every later probe keeps 1 thread: the waits
    between probes double up to 8 x every, and each probe spends only 3 steps on 2 threads."""
    c, lines, seen = run({1: 0.030, 2: 0.240}, 2000, every=20)
    # where a later probe moves from 1 thread (in use, timed first) to 2 (after step 40: the
    # first probe starts at 2 threads, and the steps before it run at the test's count)
    starts = [i for i in range(40, len(seen)) if seen[i] == 2 and seen[i - 1] == 1]
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    assert gaps[:3] == sorted(gaps[:3]) and max(gaps) <= 8 * 20 + 10 and gaps[0] < gaps[2]
    assert all(seen[a:a + 4].count(2) == 3 for a in starts if a + 4 <= len(seen)), \
        [seen[a:a + 5] for a in starts]
    assert len(lines) == 1 and c.chosen == 1


def test_who_may_choose(monkeypatch):
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    args = types.SimpleNamespace(threads=None)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    assert isinstance(ThreadChooser.for_run(cpu, args, 1), ThreadChooser)
    assert ThreadChooser.for_run(cuda, args, 1) is None                  # a GPU run
    assert ThreadChooser.for_run(cpu, args, 2) is None                   # torchrun's processes
    assert ThreadChooser.for_run(cpu, types.SimpleNamespace(threads=2), 1) is None   # --threads
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert ThreadChooser.for_run(cpu, args, 1) is None                   # the user's setting
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    assert ThreadChooser.for_run(cpu, args, 1) is None                   # one core


def test_a_training_run_chooses_its_threads(data_dir, tmp_path, monkeypatch, capsys,
                                            restore_threads):
    """Without --threads or OMP_NUM_THREADS, a CPU run with two cores probes and says which
    count it keeps; with --threads it never does."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "PROBE_STEPS", 2)
    real = torch.get_num_threads
    monkeypatch.setattr(torch, "get_num_threads", lambda: max(2, real()))
    base = ["--data", str(data_dir), "--size", "tiny", "--max_steps", "12", "--log_every", "6"]
    assert electra_small.main([*base, "--out_dir", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert sum(l.startswith("threads: ") for l in out.splitlines()) == 1, out
    assert electra_small.main([*base, "--out_dir", str(tmp_path / "b"), "--threads", "1"]) == 0
    assert "threads: " not in capsys.readouterr().out

"""torchrun with 2 CPU processes (gloo): the same script, DistributedDataParallel."""

import socket

import torch

import batches
from machinery.checkpoint import load_checkpoint
from conftest import HANG, run_cli


def test_ranks_read_disjoint_halves_of_the_global_batch(data_dir):
    whole = batches.PretrainingData(data_dir, "train", 8, 32, seed=3)
    halves = [batches.PretrainingData(data_dir, "train", 8, 32, seed=3, rank=r, world=2)
              for r in range(2)]
    for _ in range(3):
        w, hs = whole.next_batch(), [h.next_batch() for h in halves]
        for key in ("x", "segment_ids", "pad_mask"):
            assert torch.equal(w[key], torch.cat([h[key] for h in hs])), key
    # masks differ between ranks (each rank has its own mask RNG)
    assert halves[0].mask_generator().initial_seed() != halves[1].mask_generator().initial_seed()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def why(r):
    """The children's own complaints first (torchrun's summary buries them under its own)."""
    own = [l for l in r.stderr.splitlines()
           if any(w in l for w in ("terminate", "what()", "Error", "error:", "Traceback"))]
    return "\n".join(own[:20]) + "\n...\n" + r.stderr[-1500:]


def test_torchrun_two_processes_trains_and_checkpoints(data_dir, tmp_path):
    out = tmp_path / "ddp"
    r = run_cli("-m", "torch.distributed.run", "--nproc_per_node=2",
                f"--master_port={free_port()}",
                "electra_small.py", "--data", data_dir, "--out_dir", out, "--size", "tiny",
                "--max_steps", "12", "--log_every", "4", "--threads", "1", timeout=HANG)
    assert r.returncode == 0, why(r)
    assert r.stdout.count("step 12 |") == 1            # only rank 0 prints
    ckpt = load_checkpoint(out / "ckpt.pt")
    assert ckpt["step"] == 12 and ckpt["world"] == 2
    assert not any(k.startswith("module.") for k in ckpt["model"])   # the unwrapped model
    # it resumes in a single process from the same checkpoint
    r = run_cli("electra_small.py", "--data", data_dir, "--out_dir", out, "--resume",
                "--max_steps", "14", "--log_every", "1", "--threads", "1")
    assert r.returncode == 0, r.stderr
    assert "step 14 |" in r.stdout


# A torchrun child that runs electra_small.py with torch.compile replaced by a module that
# fails at its first call, and counts the DistributedDataParallel wrappers it builds.
FAILING_COMPILE = '''
import atexit, os, sys
sys.path.insert(0, {root!r})
import torch
class FailingCompile(torch.nn.Module):
    def __init__(self, model, **kw):
        super().__init__()
        self._orig_mod = model
    def forward(self, *a, **k):
        raise RuntimeError("forced compile failure for the test")
torch.compile = FailingCompile
built = []
init = torch.nn.parallel.DistributedDataParallel.__init__
def counting(self, *a, **k):
    built.append(1)
    init(self, *a, **k)
torch.nn.parallel.DistributedDataParallel.__init__ = counting
atexit.register(lambda: open(os.path.join({out!r}, "ddp_built_" + os.environ["RANK"]), "w")
                .write(str(len(built))))
import electra_small
sys.exit(electra_small.main(sys.argv[1:]))
'''


def test_torchrun_with_a_failed_compile_trains_on_in_one_ddp_and_saves(data_dir, tmp_path):
    """--compile under torchrun compiles the model inside DDP; when that compile fails at the
    first step, each rank says so in one line and goes on eagerly in the *same*
    DistributedDataParallel (its module swapped for the eager model), never a second one that
    would all-reduce every gradient twice."""
    from conftest import ROOT
    out = tmp_path / "ddp"
    out.mkdir()
    script = tmp_path / "failing_compile.py"
    script.write_text(FAILING_COMPILE.format(root=str(ROOT), out=str(out)))
    r = run_cli("-m", "torch.distributed.run", "--nproc_per_node=2",
                f"--master_port={free_port()}", script, "--data", data_dir, "--out_dir",
                out / "run", "--size", "tiny", "--max_steps", "6", "--log_every", "3",
                "--threads", "1", "--compile", timeout=HANG)
    assert r.returncode == 0, why(r)
    assert r.stderr.count("torch.compile failed (RuntimeError: forced compile failure") == 2
    assert "continuing eagerly" in r.stderr and r.stdout.count("step 6 |") == 1
    assert [(out / f"ddp_built_{rank}").read_text() for rank in (0, 1)] == ["1", "1"]
    ckpt = load_checkpoint(out / "run" / "ckpt.pt")
    assert ckpt["step"] == 6 and ckpt["world"] == 2
    assert not any(k.startswith(("module.", "_orig_mod.")) for k in ckpt["model"])


def two_nodes(data_dir, out, steps, *extra):
    """torchrun twice on this machine as two nodes of one process each (--nnodes 2, static
    rendezvous on 127.0.0.1, gloo): what a two-machine run does, its network the loopback."""
    import os
    import subprocess
    import sys
    from conftest import ROOT
    port = free_port()
    env = dict(os.environ, PYTHONUNBUFFERED="1", GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    procs = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node_rank={rank}",
         "--nproc_per_node=1", "--master_addr=127.0.0.1", f"--master_port={port}",
         "electra_small.py", "--data", str(data_dir), "--out_dir", str(out), "--size", "tiny",
         "--max_steps", str(steps), "--log_every", "2", "--threads", "1", *extra],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for rank in (0, 1)]
    results = []
    for p in procs:
        try:
            o, e = p.communicate(timeout=HANG)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        results.append(subprocess.CompletedProcess(p.args, p.returncode, o, e))
    return results


def test_two_nodes_train_checkpoint_and_resume(data_dir, tmp_path):
    out = tmp_path / "two_nodes"
    node0, node1 = two_nodes(data_dir, out, 4)
    assert node0.returncode == 0 and node1.returncode == 0, why(node0) + why(node1)
    assert "step 4 |" in node0.stdout and "step 4 |" not in node1.stdout   # global rank 0 logs
    ckpt = load_checkpoint(out / "ckpt.pt")
    assert ckpt["step"] == 4 and ckpt["world"] == 2
    node0, node1 = two_nodes(data_dir, out, 6, "--resume")
    assert node0.returncode == 0 and node1.returncode == 0, why(node0) + why(node1)
    assert "step 6 |" in node0.stdout and "step 2 |" not in node0.stdout   # continued at 5
    assert load_checkpoint(out / "ckpt.pt")["step"] == 6

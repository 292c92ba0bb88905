"""Multi-GPU data parallelism with torchrun (machinery; no paper section - skip on first read).

    torchrun --nproc_per_node=4 electra_small.py --data data/wiki --hours 6

Each process (rank) holds a full copy of the model and trains on its own 1/N of every batch;
DistributedDataParallel averages the gradients during backward, so all copies stay identical
and the *global* batch is still Table 6's 128 sequences. A plain `python electra_small.py`
never touches this file's process groups: single-process runs are unchanged.

Two details make a time budget work across processes: the learning rate must be the same on
every rank (else the copies drift apart), and every rank must stop at the same step (else the
others hang in an all-reduce). So rank 0's clock is the clock: it is broadcast every step over
a small CPU (gloo) group, which costs microseconds and never waits on the GPU.
"""
import os
from datetime import timedelta

import torch
import torch.distributed as dist


class Dist:
    """rank / world size, and the few collective operations the trainer needs."""

    def __init__(self):
        self.enabled = "RANK" in os.environ and "WORLD_SIZE" in os.environ
        self.rank, self.world, self.local_rank = 0, 1, 0
        if not self.enabled:
            return
        self.rank, self.world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        self.local_rank = int(os.environ.get("LOCAL_RANK", 0))
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(self.local_rank)
        dist.init_process_group(backend)
        self.cpu_group = dist.new_group(backend="gloo") if backend == "nccl" else None

    @property
    def main(self):
        """Only rank 0 prints, logs and writes checkpoints."""
        return self.rank == 0

    def device(self, default):
        if self.enabled and torch.cuda.is_available():
            return torch.device("cuda", self.local_rank)
        return default

    def wrap(self, model, find_unused=False):
        """DDP around the model; `find_unused` for objectives that leave parameters without
        gradients in some steps (two-stage training)."""
        if not self.enabled:
            return model
        ids = [self.local_rank] if torch.cuda.is_available() else None
        return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids,
                                                         find_unused_parameters=find_unused)

    def broadcast_float(self, value):
        """Rank 0's value on every rank (the clock that drives the LR and the deadline)."""
        if not self.enabled:
            return value
        t = torch.tensor([value], dtype=torch.float64)
        dist.broadcast(t, src=0, group=self.cpu_group)
        return t.item()

    def sum(self, tensor):
        """Sum of a statistics tensor over ranks (for the progress line)."""
        if self.enabled:
            dist.all_reduce(tensor)
        return tensor

    def barrier(self):
        if self.enabled:
            dist.barrier()

    def close(self):
        """Tear the process group down once every rank is here. Rank 0 still writes the last
        checkpoint when the others finish; a rank that closed its sockets then could make the
        other's gloo thread abort (SIGABRT), as CI once saw. The barrier has a deadline, so a
        rank that stopped alone (an error only it saw) still exits instead of hanging."""
        if not self.enabled:
            return
        try:
            dist.monitored_barrier(group=self.cpu_group, timeout=timedelta(seconds=60))
        except RuntimeError:
            pass                      # a rank that never arrives: exit anyway
        dist.destroy_process_group()

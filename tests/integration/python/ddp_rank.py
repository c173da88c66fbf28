# SPDX-License-Identifier: Apache-2.0
"""One rank of test_ddp: the same DDP training on the harmonaize backend and
on Gloo, side by side in one process, from the same initial weights and data.

Prints one JSON line: how far apart the two models' parameters ended up,
whether they are bit-identical, and whether DDP's gradient buckets (which
the gradients are views of) lay in the device's registered memory.
"""

from __future__ import annotations

import datetime
import json
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import harmonaize
import harmonaize.distributed  # noqa: F401  (registers the backend)

STEPS = 20


def model() -> torch.nn.Module:
    torch.manual_seed(1234)
    return torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.Tanh(),
                               torch.nn.Linear(512, 512), torch.nn.Tanh(),
                               torch.nn.Linear(512, 10))


def batch(step: int, rank: int):
    g = torch.Generator().manual_seed(step * 131 + rank)
    return torch.randn(32, 64, generator=g), torch.randint(0, 10, (32,), generator=g)


def train(ddp: DDP, rank: int) -> None:
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    for step in range(STEPS):
        x, y = batch(step, rank)
        opt.zero_grad(set_to_none=False)
        loss_fn(ddp(x), y).backward()
        opt.step()


def main() -> int:
    dist.init_process_group("harmonaize", timeout=datetime.timedelta(seconds=120))
    rank = dist.get_rank()
    gloo = dist.new_group(backend="gloo")
    # Several buckets: DDP all-reduces them as the backward pass produces them.
    kwargs = dict(bucket_cap_mb=0.25, gradient_as_bucket_view=True)
    hz_model = DDP(model(), **kwargs)
    gloo_model = DDP(model(), process_group=gloo, **kwargs)
    train(hz_model, rank)
    train(gloo_model, rank)

    dev = harmonaize.device()
    grads = [p.grad for p in hz_model.parameters()]
    registered = sum(g.numel() * 4 for g in grads
                     if dev.is_registered(g.data_ptr(), g.numel() * g.element_size()))
    pairs = list(zip(hz_model.parameters(), gloo_model.parameters()))
    identical = all(torch.equal(a, b) for a, b in pairs)
    max_diff = max((a - b).abs().max().item() for a, b in pairs)
    scale = max(b.abs().max().item() for _, b in pairs)
    print(json.dumps({"rank": rank, "identical": identical, "max_abs_diff": max_diff,
                      "max_abs_param": scale, "grad_bytes": sum(g.numel() * 4 for g in grads),
                      "registered_grad_bytes": registered}), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

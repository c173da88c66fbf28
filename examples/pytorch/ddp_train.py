# SPDX-License-Identifier: Apache-2.0
"""DDP training that cooperates with the provider, on the harmonaize backend.

Launched the way PyTorch jobs are::

    /usr/bin/python3 -m torch.distributed.run --standalone --nproc_per_node 3 \\
        --redirects 1 --tee 1 examples/pytorch/ddp_train.py --socket-dir /run/harmonaize --steps 60

(torch 1.13 spells the flag --nproc_per_node, and under Python 3.11 its
torchrun cannot parse its own default --redirects/--tee, so they are given.)

Each rank picks its device from LOCAL_RANK (``<socket-dir>/vm<LOCAL_RANK>.sock``,
a container tenant's socket; without --socket-dir, ``$HZ_DEVICE`` or the VM's
``/dev/harmonaize0``), trains a small model on synthetic data with
DistributedDataParallel over ``backend="harmonaize"``, and listens for the
provider's maintenance and preemption notices. When any rank receives one,
all ranks save their state through the provider at the same step (each rank
its own checkpoint stream), every rank approves its notice (the job is ready
for the maintenance to start early), and training carries on. Started again
with ``--resume``, each rank restores its checkpoint and continues from the
step it saved; since data and reductions are deterministic, the resumed run
ends with the same parameters as the run that never stopped.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import os
import sys
import time
from typing import Optional

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import harmonaize
import harmonaize.distributed  # noqa: F401  (registers the "harmonaize" backend)
from harmonaize import Topic

NOTICES = (Topic.MAINTENANCE, Topic.PREEMPTION)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--socket-dir", help="directory of the ranks' device sockets")
    p.add_argument("--socket-prefix", default="vm", help="socket name before LOCAL_RANK")
    p.add_argument("--steps", type=int, default=60, help="training steps in all")
    p.add_argument("--resume", action="store_true", help="restore the last checkpoint first")
    p.add_argument("--ready-dir", help="create ready<RANK> here once listening for notices")
    p.add_argument("--ready-step", type=int, default=0,
                   help="... and past this many steps (default: at the start)")
    p.add_argument("--expect-notice", action="store_true",
                   help="if no notice came before the last step, wait for one (bounded)")
    p.add_argument("--notice-timeout-s", type=float, default=60.0)
    p.add_argument("--result", help="rank 0 writes the final parameters' SHA-256 here")
    return p.parse_args()


def say(msg: str) -> None:
    print(f"rank {dist.get_rank() if dist.is_initialized() else '?'}: {msg}", flush=True)


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)  # the same initial weights on every rank (and in every run)
    return torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(),
                               torch.nn.Linear(256, 256), torch.nn.ReLU(),
                               torch.nn.Linear(256, 4))


def batch(step: int, rank: int):
    """Synthetic data: a fixed function of (step, rank), so a resumed run sees
    exactly the batches the uninterrupted one saw."""
    g = torch.Generator().manual_seed(step * 1009 + rank)
    x = torch.randn(64, 32, generator=g)
    y = (x[:, :4] * 2.0 + 0.1 * torch.randn(64, 4, generator=g))
    return x, y


class Job:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.dev = harmonaize.device()
        self.rank = dist.get_rank()
        self.stream = self.rank + 1  # one checkpoint stream per rank
        self.model = DDP(make_model())
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.step = 0  # steps completed
        self.pending_notice: Optional[harmonaize.Event] = None
        self.saved_at: Optional[int] = None

    # ---- the provider's notices --------------------------------------------------

    def poll_notice(self, timeout: float = 0) -> None:
        """Keeps this rank's pending notice; acknowledges anything else."""
        while self.pending_notice is None:
            ev = self.dev.next_event(timeout)
            if ev is None:
                return
            if ev.is_notice(*NOTICES) and (ev.deadline_s == 0 or ev.deadline_s > time.time()):
                self.pending_notice = ev
                say(f"notice: {ev}")
            else:
                self.dev.ack(ev)  # not for us, or a notice whose time has passed

    def any_rank_noticed(self) -> bool:
        flag = torch.tensor([1 if self.pending_notice else 0], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def react(self) -> None:
        """All ranks save at this step; each then approves its own notice."""
        self.save()
        self.poll_notice(self.args.notice_timeout_s)  # it may reach this rank a little later
        ev = self.pending_notice
        if ev is None:
            raise harmonaize.TimedOutError("another rank got a notice; this one never did")
        self.dev.ack(ev, approve=ev.approvable)
        say(f"acknowledged notice {ev.seq}" + (", approved an early start" if ev.approvable
                                               else ""))
        self.pending_notice = None

    # ---- checkpoints -----------------------------------------------------------------

    def state(self):
        return {"model": self.model.module.state_dict(), "optim": self.opt.state_dict()}

    def save(self) -> None:
        self.dev.set_checkpoint_policy(self.stream, retention=2, tier=harmonaize.Tier.LOCAL_DISK)
        r = self.dev.save_state(self.state(), stream=self.stream, step=self.step,
                                extra={"step": self.step, "world_size": dist.get_world_size()})
        self.saved_at = self.step
        say(f"saved step {self.step} through the provider (stream {self.stream}, "
            f"{r.info.bytes} bytes, {r.zero_copy_bytes} zero-copy, {r.staged_bytes} staged, "
            f"stall {r.info.stall_us} us)")

    def restore(self) -> None:
        state, r = self.dev.restore_state(stream=self.stream)
        if r.extra["world_size"] != dist.get_world_size():
            raise harmonaize.InvalidArgumentError("checkpoint of a different world size")
        self.model.module.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optim"])
        self.step = r.extra["step"]
        say(f"restored step {self.step} from the provider (stream {self.stream}, "
            f"{r.info.bytes} bytes, verified)")

    # ---- training ----------------------------------------------------------------------

    def train_step(self) -> float:
        x, y = batch(self.step, self.rank)
        self.opt.zero_grad()
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        loss.backward()
        self.opt.step()
        self.step += 1
        return loss.item()

    def signal_ready(self) -> None:
        if self.args.ready_dir:
            with open(os.path.join(self.args.ready_dir, f"ready{self.rank}"), "w"):
                pass

    def run(self) -> str:
        if self.step >= self.args.ready_step:
            self.signal_ready()
        while self.step < self.args.steps:
            loss = self.train_step()
            if self.step == self.args.ready_step:
                self.signal_ready()
            if self.step % 10 == 0 or self.step == self.args.steps:
                say(f"step {self.step}: loss {loss:.5f}")
            self.poll_notice()
            if self.step == self.args.steps and self.args.expect_notice and self.saved_at is None:
                self.poll_notice(self.args.notice_timeout_s)
            if self.any_rank_noticed():
                self.react()
        return checksum(self.model.module)


def checksum(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def main() -> int:
    args = parse_args()
    if args.socket_dir:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        os.environ["HZ_DEVICE"] = (
            f"vhost-user:{os.path.join(args.socket_dir, f'{args.socket_prefix}{local}.sock')}")
    dev = harmonaize.device()
    dev.subscribe(NOTICES)  # after the last acknowledged notice
    dist.init_process_group("harmonaize", timeout=datetime.timedelta(seconds=120))
    say(f"DDP on backend {dist.get_backend()} over {dev.info.transport} device {dev.spec}")
    job = Job(args)
    if args.resume:
        job.restore()
    t0 = time.monotonic()
    digest = job.run()
    say(f"trained to step {job.step} in {time.monotonic() - t0:.1f} s; "
        f"parameters sha256 {digest[:16]}")
    if job.rank == 0 and args.result:
        with open(args.result, "w") as f:
            f.write(digest + "\n")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

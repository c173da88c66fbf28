# SPDX-License-Identifier: Apache-2.0
"""examples/pytorch/ddp_train.py as a user runs it: three ranks launched with
torch.distributed.run, each on its own container-tenant socket (picked from
LOCAL_RANK). A maintenance notice published with hzctl mid-training makes
every rank save through the provider and approve; training carries on. Run
again with --resume, every rank restores the step it saved and ends with the
parameters the uninterrupted run ended with."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import time

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "pytorch",
                       "ddp_train.py")


def torchrun(service, *args: str) -> subprocess.Popen:
    # Debian's torch 1.13 on Python 3.11 cannot parse torchrun's default
    # --redirects/--tee ("0"), so both are given: stdout teed into per-rank logs.
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "3",
           "--redirects", "1", "--tee", "1", "--log_dir", os.path.join(service.dir, "logs"),
           EXAMPLE, "--socket-dir", service.dir, "--socket-prefix", "ml-vm", "--steps", "30",
           *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, OMP_NUM_THREADS="1"))


def test_training_saves_on_a_notice_and_resumes(service) -> None:
    service.tenant_with_vms("ml", 3)
    ready = os.path.join(service.dir, "ready")
    os.makedirs(ready)
    first = torchrun(service, "--ready-dir", ready, "--ready-step", "10", "--expect-notice",
                     "--result", os.path.join(service.dir, "first"))
    deadline = time.monotonic() + 240
    while len(glob.glob(os.path.join(ready, "ready*"))) < 3 and first.poll() is None:
        assert time.monotonic() < deadline, "the ranks never got ready"
        time.sleep(0.1)
    service.maintenance("ml", deadline_s=600, duration_s=300)
    out, _ = first.communicate(timeout=240)
    assert first.returncode == 0, out
    for rank in range(3):
        assert f"rank {rank}: saved step" in out, out
        assert f"rank {rank}: acknowledged notice" in out and "approved an early start" in out, out
    status = service.hzctl("event", "status", "--tenant", "ml")["result"]
    assert status["approved"], status  # the approval reached the provider
    streams = service.hzctl("checkpoint", "list", "--tenant", "ml")["result"]["streams"]
    assert sorted(s["stream"] for s in streams) == [1, 2, 3], streams  # one per rank

    resumed = torchrun(service, "--resume", "--result", os.path.join(service.dir, "resumed"))
    out2, _ = resumed.communicate(timeout=240)
    assert resumed.returncode == 0, out2
    for rank in range(3):
        assert f"rank {rank}: restored step" in out2, out2
    with open(os.path.join(service.dir, "first")) as a, \
            open(os.path.join(service.dir, "resumed")) as b:
        assert a.read() == b.read(), out + out2

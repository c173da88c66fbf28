# SPDX-License-Identifier: Apache-2.0
"""The harmonaize package against a real harmonaized, in the test's own
process (a container tenant): errors, the device, registered memory,
events (iterator, selectors, asyncio, approval), checkpoints of PyTorch
state (zero-copy and staged), hints and the topology summary."""

from __future__ import annotations

import asyncio
import collections
import pickle
import selectors
import time

import pytest
import torch

import harmonaize
from harmonaize import _native, errors


@pytest.fixture(scope="module")
def dev(sockets) -> harmonaize.Device:
    (sock,) = sockets(1)
    return harmonaize.device(f"vhost-user:{sock}")


# ---- errors ------------------------------------------------------------------


def test_every_error_code_has_its_own_exception_class() -> None:
    classes = {}
    for code, text in _native.ERROR_CODES.items():
        with pytest.raises(errors.HarmonaizeError) as info:
            _native.raise_error(code, "an operation")
        e = info.value
        assert type(e) is errors.error_class(code), code
        assert e.code == code and e.name.startswith("HZ_E")
        assert text in str(e) and "an operation" in str(e)
        assert isinstance(e, RuntimeError)
        classes[code] = type(e)
    assert len(set(classes.values())) == len(classes)  # one class per code
    assert issubclass(errors.InvalidArgumentError, ValueError)
    assert issubclass(errors.NotFoundError, LookupError)
    for cls in (errors.TimedOutError, errors.AbortedError, errors.MismatchError):
        assert issubclass(cls, errors.CollectiveError)
    for cls in (errors.NoDeviceError, errors.TransportError, errors.ShutdownError):
        assert issubclass(cls, errors.DeviceLostError)


def test_errors_survive_pickling_and_unknown_codes_keep_theirs() -> None:
    e = pickle.loads(pickle.dumps(errors.error_for(-9, "all-reduce: aborted")))
    assert type(e) is errors.AbortedError and e.code == -9 and "aborted" in str(e)
    unknown = errors.error_for(-77, "something new")
    assert type(unknown) is errors.HarmonaizeError and unknown.code == -77


def test_a_missing_device_raises_no_device_error() -> None:
    with pytest.raises(errors.NoDeviceError, match="nonexistent"):
        harmonaize.Device("vhost-user:/nonexistent/hz.sock")


# ---- the device and its memory -------------------------------------------------


def test_the_process_has_one_device(dev: harmonaize.Device) -> None:
    assert harmonaize.device() is dev
    assert harmonaize.device(dev.spec) is dev
    with pytest.raises(errors.InvalidArgumentError):
        harmonaize.device("vhost-user:/some/other.sock")
    info = dev.info
    assert info.transport == "vhost-user" and info.version == (1, 1)
    assert info.features & 1  # collectives
    assert info.num_request_queues >= 1


def test_registered_memory_is_writable_and_reused(dev: harmonaize.Device) -> None:
    buf = dev.alloc(100_000)
    view = memoryview(buf)
    view[:4] = b"abcd"
    assert bytes(view[:4]) == b"abcd" and len(buf) == 100_000
    assert dev.is_registered(buf.address, 100_000)
    assert dev.is_registered(buf.address + 10, 1000)
    assert not dev.is_registered(id(view), 8)
    t = torch.frombuffer(buf, dtype=torch.float32)
    assert dev.is_registered(t.data_ptr(), t.numel() * 4)
    del t, view, buf
    hits = dev.memory_stats()["hits"]
    again = dev.alloc(100_000)  # the same size class comes back from the cache
    assert dev.memory_stats()["hits"] == hits + 1
    del again
    assert dev.trim_memory() > 0
    assert dev.memory_stats()["cached_bytes"] == 0


def test_topology_and_hints(dev: harmonaize.Device) -> None:
    topo = dev.topology()
    assert topo.num_hosts >= 0 and isinstance(topo.groups, list)
    assert all({"index", "kind", "group"} <= set(d) for d in topo.devices)
    suggested = dev.hint_batch_size(8, 64, 8)
    assert 8 <= suggested <= 64 and (suggested - 8) % 8 == 0


def test_energy_slack_is_declared_and_withdrawn(dev: harmonaize.Device) -> None:
    with pytest.raises(errors.InvalidArgumentError):
        dev.energy_slack(91, 60)
    before = int(time.time())
    assert dev.energy_slack(30, 600) >= before + 600
    assert dev.energy_slack(0, 0) == 0


# ---- events ---------------------------------------------------------------------


def test_a_maintenance_notice_is_received_and_approved(service, dev: harmonaize.Device) -> None:
    dev.subscribe([harmonaize.Topic.MAINTENANCE])
    assert dev.next_event(timeout=0) is None
    service.maintenance("py", deadline_s=600, duration_s=300)
    ev = dev.next_event(timeout=30)
    assert ev is not None, service.log()
    assert ev.topic == harmonaize.Topic.MAINTENANCE and ev.kind_name == "SCHEDULED"
    assert ev.is_notice() and ev.approvable and not ev.replay
    assert ev.deadline_s > time.time() + 300
    assert ev.fields["duration_s"] == 300
    assert ev.fields["device_index"] == harmonaize.ALL_DEVICES
    assert "MAINTENANCE/SCHEDULED" in str(ev)
    dev.ack(ev, approve=True)
    status = service.hzctl("event", "status", "--tenant", "py")
    assert str(ev.seq) in str(status)  # the approval is in the tenant's durable event state


def test_events_iterate_and_poll_with_selectors(service, dev: harmonaize.Device) -> None:
    dev.subscribe(harmonaize.Topic.MAINTENANCE)
    sel = selectors.DefaultSelector()
    sel.register(dev, selectors.EVENT_READ)  # uses dev.fileno()
    service.maintenance("py", deadline_s=900)
    assert sel.select(timeout=30), "the event descriptor never became readable"
    got = list(dev.events(timeout=2))
    assert [e.kind_name for e in got] == ["SCHEDULED"]
    dev.ack(got[-1])
    sel.close()


def test_events_await_with_asyncio(service, dev: harmonaize.Device) -> None:
    dev.subscribe(harmonaize.Topic.MAINTENANCE)

    async def main():
        waiter = asyncio.ensure_future(dev.next_event_async(timeout=30))
        await asyncio.sleep(0.2)  # the loop keeps running while the rank waits
        service.maintenance("py", deadline_s=1200)
        return await waiter

    ev = asyncio.run(main())
    assert ev is not None and ev.topic == harmonaize.Topic.MAINTENANCE
    dev.ack(ev)


def test_a_restarted_subscription_resumes_after_the_acknowledged_event(
        service, dev: harmonaize.Device) -> None:
    dev.subscribe(harmonaize.Topic.MAINTENANCE)
    service.maintenance("py", deadline_s=1500)
    first = dev.next_event(timeout=30)
    dev.ack(first)
    dev.subscribe(harmonaize.Topic.MAINTENANCE)  # from the cursor: nothing acknowledged again
    service.maintenance("py", deadline_s=1600)
    second = dev.next_event(timeout=30)
    assert second is not None and second.seq > first.seq and not second.replay
    dev.ack(second)
    assert dev.next_event(timeout=0.5) is None


# ---- checkpoints --------------------------------------------------------------------


def model_and_optimizer():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(40, 300), torch.nn.ReLU(), torch.nn.Linear(300, 3))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(8, 40)).sum().backward()
    opt.step()
    return model, opt


def test_state_dicts_round_trip_through_the_provider(dev: harmonaize.Device) -> None:
    dev.set_checkpoint_policy(11, retention=3, tier=harmonaize.Tier.LOCAL_DISK)
    model, opt = model_and_optimizer()
    state = {"model": model.state_dict(), "optim": opt.state_dict(), "epoch": 3,
             "odd": (torch.tensor(True), torch.empty(0), torch.arange(5, dtype=torch.int8)),
             "rng": torch.get_rng_state(), "half": torch.randn(7, 3).to(torch.bfloat16)}
    saved = dev.save_state(state, stream=11, step=5, extra={"step": 5})
    assert saved.info.step == 5 and saved.tensors == 21 and saved.staged_bytes > 0

    restored, result = dev.restore_state(stream=11)
    assert result.info.step == 5 and result.extra == {"step": 5}
    assert restored["epoch"] == 3 and set(restored) == set(state)
    for k, v in state["model"].items():
        assert torch.equal(restored["model"][k], v)
    assert list(restored["optim"]["state"]) == [0, 1, 2, 3]  # int keys stay ints
    fresh_model, fresh_opt = model_and_optimizer()
    fresh_opt.load_state_dict(restored["optim"])
    fresh_model.load_state_dict(restored["model"])
    assert torch.equal(fresh_opt.state_dict()["state"][0]["exp_avg"],
                       opt.state_dict()["state"][0]["exp_avg"])
    assert restored["odd"][0].item() is True and restored["odd"][1].numel() == 0
    assert torch.equal(restored["half"], state["half"])
    assert isinstance(restored["odd"], tuple)


def test_registered_tensors_are_saved_and_restored_in_place(dev: harmonaize.Device) -> None:
    dev.set_checkpoint_policy(12, tier=harmonaize.Tier.HOST_MEMORY)
    buf = dev.alloc(4 * 65536)
    weights = torch.frombuffer(buf, dtype=torch.float32).view(256, 256)
    weights.copy_(torch.randn(256, 256))
    small = torch.randn(10)  # ordinary memory: staged
    saved = dev.save_state({"w": weights, "b": small}, stream=12, step=1)
    assert saved.zero_copy_bytes == 4 * 65536 and saved.staged_bytes == 40
    assert saved.info.durable  # host-memory tier: durable at once
    want_w, want_b = weights.clone(), small.clone()
    weights.zero_()
    small.zero_()
    target = {"w": weights, "b": small}
    state, result = dev.restore_state(stream=12, into=target)
    assert result.zero_copy_bytes == 4 * 65536 and result.staged_bytes == 40
    assert state["w"] is weights and torch.equal(weights, want_w) and torch.equal(small, want_b)


def test_checkpoints_are_listed_deleted_and_checked(dev: harmonaize.Device) -> None:
    dev.set_checkpoint_policy(13, retention=5, tier=harmonaize.Tier.HOST_MEMORY)
    for step in (1, 2, 3):
        dev.save_state({"x": torch.full((4,), float(step))}, stream=13, step=step)
    assert [c.step for c in dev.list_checkpoints(13)] == [1, 2, 3]
    state, _ = dev.restore_state(stream=13, step=2)
    assert state["x"][0].item() == 2.0
    dev.delete_checkpoint(13, 3)
    assert [c.step for c in dev.list_checkpoints(13)] == [1, 2]
    with pytest.raises(errors.AlreadyExistsError):
        dev.save_state({"x": torch.zeros(4)}, stream=13, step=2)
    with pytest.raises(errors.NotFoundError):
        dev.restore_state(stream=999)
    with pytest.raises(errors.InvalidArgumentError, match="differ"):
        dev.restore_state(stream=13, into={"y": torch.zeros(4)})
    with pytest.raises(errors.InvalidArgumentError, match="cannot checkpoint"):
        dev.save_state({"x": object()}, stream=13, step=9)
    od = collections.OrderedDict(a=torch.ones(2))
    dev.save_state(od, stream=13, step=10)
    assert torch.equal(dev.restore_state(stream=13)[0]["a"], torch.ones(2))

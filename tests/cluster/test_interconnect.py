"""Interconnect specs and the shared link: transfer times worked out by hand, alone and shared."""

from __future__ import annotations

import math

import pytest
from schedsim.cluster.interconnect import (
    INTERCONNECTS,
    get_interconnect,
    kv_block_bytes_per_gpu,
    transfer_blocks,
)
from schedsim.cluster.link import Flow, LinkModel
from schedsim.latency.specs import get_model_spec

pytestmark = pytest.mark.pure_python

IB = get_interconnect("ib-400g")  # 50 GB/s, 5 µs


def test_named_specs_carry_the_datasheet_figures() -> None:
    assert IB.bandwidth == 50e9 and IB.latency == 5e-6
    assert get_interconnect("ib-200g").bandwidth == 25e9
    assert get_interconnect("nvlink").bandwidth == 450e9
    assert get_interconnect("pcie-gen4").bandwidth == 31.5e9
    assert get_interconnect("pcie-gen5").bandwidth == 63e9
    assert get_interconnect("eth-100g").bandwidth == 12.5e9
    assert INTERCONNECTS["rdma-400g"].bandwidth == INTERCONNECTS["ib-400g"].bandwidth


def test_custom_link_and_bad_names() -> None:
    spec = get_interconnect("custom:10:3")
    assert spec.bandwidth == 10e9 and spec.latency == pytest.approx(3e-6)
    for bad in ("custom:10", "custom:x:1", "custom:1:2:3", "custom:0:1", "infiniband"):
        with pytest.raises(ValueError, match="interconnect"):
            get_interconnect(bad)


def test_kv_bytes_from_the_model_spec() -> None:
    model = get_model_spec("llama-3.1-8b")  # 32 layers, 8 KV heads of 128, fp16
    assert model.kv_bytes_per_token(1) == 2 * 32 * 8 * 128 * 2 == 131072
    assert kv_block_bytes_per_gpu(model, 1, 16) == 16 * 131072
    assert kv_block_bytes_per_gpu(model, 2, 16) == 16 * 131072 // 2  # each GPU holds half the heads
    assert [transfer_blocks(n, 16) for n in (1, 16, 17, 100)] == [1, 1, 2, 7]


def test_one_transfer_alone_moves_at_the_full_bandwidth() -> None:
    link = LinkModel(IB, 2)
    f = Flow(0, 0, 1, 14_680_064.0)  # 7 blocks of 2 MiB
    assert link.add(1.0, f) == []
    assert link.next_done() == 1.0 + 14_680_064 / 50e9
    assert link.advance(1.0001) == []
    assert link.advance(2.0) == [f]
    assert f.done == 1.0 + 14_680_064 / 50e9 and f.end == f.done + 5e-6


def test_two_transfers_into_one_replica_share_its_ingress() -> None:
    link = LinkModel(IB, 3)
    a, b = Flow(0, 0, 2, 14_680_064.0), Flow(1, 1, 2, 6_291_456.0)
    link.add(0.0, a)
    link.add(0.0, b)
    assert a.rate == b.rate == 25e9  # two transfers through replica 2's ingress
    assert link.advance(1.0) == [b, a]
    assert b.done == 6_291_456 / 25e9  # 251.66 µs at half the bandwidth
    # then a alone: its remaining 8 MiB at the full 50 GB/s
    assert a.done == pytest.approx(6_291_456 / 25e9 + (14_680_064 - 6_291_456) / 50e9, abs=1e-15)


def test_a_late_transfer_slows_the_first_from_when_it_joins() -> None:
    link = LinkModel(IB, 2)
    a, b = Flow(0, 0, 1, 100e6), Flow(1, 0, 1, 10e6)
    link.add(0.0, a)
    link.add(0.001, b)  # a sent 50 MB alone, then both at 25 GB/s
    assert link.advance(1.0) == [b, a]
    assert b.done == pytest.approx(0.001 + 10e6 / 25e9)
    assert a.done == pytest.approx(0.001 + 10e6 / 25e9 + (50e6 - 10e6) / 50e9)


def test_disjoint_pairs_do_not_share_and_the_busier_nic_sets_the_rate() -> None:
    link = LinkModel(IB, 4)
    a, b, c = Flow(0, 0, 2, 1e6), Flow(1, 0, 3, 1e6), Flow(2, 1, 2, 1e6)
    d = Flow(3, 1, 3, 1e6)
    for f in (a, b, c):
        link.add(0.0, f)
    # a: egress 0 (2 transfers), ingress 2 (2); b: egress 0 (2), ingress 3 (1); c: egress 1 (1), ingress 2 (2)
    assert a.rate == b.rate == c.rate == 25e9
    link.advance(1.0)
    link2 = LinkModel(IB, 4)
    link2.add(0.0, d)
    assert d.rate == 50e9


def test_a_transfer_may_not_join_before_the_link_was_settled() -> None:
    link = LinkModel(IB, 2)
    link.advance(1.0)
    with pytest.raises(RuntimeError, match="settled"):
        link.add(0.5, Flow(0, 0, 1, 1.0))
    assert math.isinf(link.next_done())

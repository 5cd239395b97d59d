"""Prefill/decode disaggregation: a 1P:1D cluster's step and transfer times worked out by hand,
the tables' columns, the refusals, and runs of the vLLM and TensorRT-LLM sides."""

from __future__ import annotations

import io
from collections.abc import Iterator

import numpy as np
import pandas as pd
import pytest
from schedsim import RunConfig, simulate
from support.pd_policy import registered

pytestmark = pytest.mark.pure_python


@pytest.fixture(autouse=True, scope="module")
def pd_fcfs() -> Iterator[None]:
    """The test policy, registered while this module runs."""
    with registered():
        yield


BW, LAT = 50e9, 5e-6  # ib-400g
BLOCK = 16 * 131072  # llama-3.1-8b, TP 1: 2 MiB per block


def two_requests() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "request_id": ["a", "b"],
            "arrival_time": [0.0, 0.0],
            "prompt_tokens": [100, 40],
            "output_tokens": [5, 3],
        }
    )


def hand_config(**kw) -> RunConfig:
    base = dict(
        policy="pd-fcfs",
        pd="1:1",
        cpu_cost_scale=0.0,  # every CPU phase free: the times below are GPU times and transfers
        latency_model="roofline",
        num_gpu_blocks=200,
        max_model_len=512,
        block_size=16,
    )
    return RunConfig(**{**base, **kw})


def test_one_prefill_one_decode_replica_by_hand() -> None:
    res = simulate(hand_config(), workload=two_requests(), check_invariants=True)
    steps, tr = res.steps, res.transfers.set_index("request_id")
    pre = steps[steps["replica"] == 0].reset_index(drop=True)
    dec = steps[steps["replica"] == 1].reset_index(drop=True)
    g0 = pre.loc[0, "gpu_time"]
    # prefill step 0 computes both prompts at once; both finish with their first token at g0
    assert (pre.loc[0, "start"], pre.loc[0, "end"], pre.loc[0, "num_prefill_tokens"]) == (0.0, g0, 140)
    req = res.requests.set_index("request_id")
    assert (req["prefill_first_token_time"] == g0).all() and (req["prefill_finish_time"] == g0).all()
    # the next plan announces both sends at g0; the decode replica lists both loads in its first
    # step (no tokens), which starts at g0: both transfers share the decode replica's ingress
    assert (dec.loc[0, "schedule_time"], dec.loc[0, "gpu_time"]) == (g0, 0.0)
    assert (tr["requested_time"] == g0).all() and (tr["start_time"] == g0).all()
    assert tr.loc["a", "blocks"] == 7 and tr.loc["b", "blocks"] == 3
    assert (tr["bytes"] == tr["blocks"] * BLOCK).all()
    b_done = g0 + 3 * BLOCK / (BW / 2)  # at half the bandwidth while both move
    a_done = b_done + (7 - 3) * BLOCK / BW  # then alone
    assert tr.loc["b", "done_time"] == b_done and tr.loc["b", "end_time"] == b_done + LAT
    assert tr.loc["a", "done_time"] == pytest.approx(a_done, abs=1e-12)
    assert tr.loc["a", "end_time"] == pytest.approx(a_done + LAT, abs=1e-12)
    assert (tr["queued_time"] == 0.0).all() and not tr["failed"].any()
    # the decode replica waits for the first transfer's end, collects it in an empty step, then
    # admits b: its last prompt token is computed again to sample
    b_end = b_done + LAT
    admit = dec[dec["num_prefill_tokens"] > 0].reset_index(drop=True)
    assert admit.loc[0, "schedule_time"] == b_end and admit.loc[0, "num_prefill_tokens"] == 1
    own = res.replicas[1].requests.set_index("request_id")
    assert own.loc["b", "first_scheduled_time"] == b_end
    # a's load ended while that step ran: its result carries it, and a is admitted right after
    g1 = admit.loc[0, "gpu_time"]
    assert tr.loc["a", "end_time"] < b_end + g1
    assert own.loc["a", "first_scheduled_time"] == b_end + g1
    # the prefill replica frees each request's blocks in an empty step at its transfer's end
    assert list(pre["schedule_time"][2:]) == [b_end, tr.loc["a", "end_time"]]
    # vLLM's proxy streams the decode side's response: TTFT is the decode side's first token
    assert req.loc["b", "first_token_time"] == b_end + g1
    assert req.loc["b", "ttft"] == b_end + g1
    assert list(req["num_output_tokens"]) == [5, 3] and list(req["finish_reason"]) == ["stop", "stop"]
    assert list(req["prefill_replica"]) == [0, 0] and list(req["decode_replica"]) == [1, 1]
    s = res.summary
    assert s["num_kv_transfers"] == 2 and s["kv_bytes_transferred"] == 10 * BLOCK
    assert s["num_prefill_replicas"] == 1 and s["num_decode_replicas"] == 1


def test_routing_table_has_one_decision_per_pool() -> None:
    res = simulate(hand_config(pd="2:3", router="round-robin"), workload=two_requests())
    r = res.routing
    assert list(r["pool"]) == ["prefill", "prefill", "decode", "decode"]
    assert list(r["replica"]) == [0, 1, 2, 3]
    assert set(res.load[res.load["pool"] == "decode"]["replica"]) == {2, 3, 4}


def test_a_failed_load_is_reported_to_the_decode_side() -> None:
    cfg = hand_config(kv_load_failures=["b"])
    res = simulate(cfg, workload=two_requests(), check_invariants=True)
    tr = res.transfers.set_index("request_id")
    assert bool(tr.loc["b", "failed"]) and not bool(tr.loc["a", "failed"])
    dec = res.steps[res.steps["replica"] == 1]
    # pd-fcfs recomputes a failed load's whole prompt locally
    assert (dec["num_prefill_tokens"] == 40).sum() == 1
    assert list(res.requests["finish_reason"]) == ["stop", "stop"]


def test_a_slower_link_delays_the_decode_side_only_by_the_transfer() -> None:
    fast = simulate(hand_config(), workload=two_requests())
    slow = simulate(hand_config(interconnect="custom:5:5"), workload=two_requests())
    t_fast = fast.transfers["transfer_time"].to_numpy()
    t_slow = slow.transfers["transfer_time"].to_numpy()
    assert t_slow == pytest.approx((t_fast - LAT) * 10 + LAT)
    assert (slow.requests["ttft"] > fast.requests["ttft"]).all()


def test_a_policy_without_kv_transfers_is_refused() -> None:
    with pytest.raises(ValueError, match="declares no SupportsKVTransfer") as exc:
        simulate(hand_config(policy="orca"), workload=two_requests())
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"pd": "2"}, "RunConfig.pd"),
        ({"pd": "0:2"}, "RunConfig.pd"),
        ({"pd": "1:1", "replicas": 3}, "contradicts pd"),
        ({"interconnect": "fast"}, "RunConfig.interconnect"),
    ],
)
def test_bad_pd_configs_name_the_field(kw, match) -> None:
    with pytest.raises(ValueError, match=match):
        RunConfig(**kw)


def tables_bytes(res) -> dict[str, bytes]:
    out = {}
    for name, table in res.tables().items():
        buf = io.BytesIO()
        table.to_parquet(buf)
        out[name] = buf.getvalue()
    return out


@pytest.mark.parametrize("policy", ["vllm", "vllm-async", "trtllm:max-utilization"])
def test_pd_runs_account_for_every_request_exactly_with_and_without_fast_forward(policy: str) -> None:
    cfg = RunConfig(policy=policy, pd="2:2", max_requests=40, rate=8.0, kv_load_failure_fraction=0.1)
    res = simulate(cfg, check_invariants=True)
    req = res.requests
    assert req["finish_reason"].notna().all()
    assert (req["prefill_replica"].between(0, 1)).all()
    handed = req["decode_replica"] >= 0
    assert req.loc[handed, "decode_replica"].between(2, 3).all()
    assert len(res.transfers) == handed.sum()
    assert res.summary["fast_forward_steps"] > 0
    off = simulate(RunConfig(**{**cfg.to_dict(), "fast_forward": False}))
    assert off.summary["fast_forward_steps"] == 0
    a, b = tables_bytes(res), tables_bytes(off)
    assert a.keys() == b.keys() and all(a[k] == b[k] for k in a), [k for k in a if a[k] != b[k]]


def test_trtllm_decode_continues_after_the_prefills_first_token() -> None:
    cfg = RunConfig(policy="trtllm:max-utilization", pd="1:1", max_requests=10, rate=4.0)
    res = simulate(cfg)
    req = res.requests
    # the disaggregated server streams the context phase's token first
    assert (req["first_token_time"] == req["prefill_first_token_time"]).all()
    assert (req["num_output_tokens"] == req["target_output_tokens"]).all()
    colocated = simulate(RunConfig(policy="trtllm:max-utilization", max_requests=10, rate=4.0))
    assert np.array_equal(req["output_hash"], colocated.requests["output_hash"])


def test_vllm_decode_outputs_equal_the_colocated_run() -> None:
    pdres = simulate(RunConfig(policy="vllm", pd="1:1", max_requests=10, rate=4.0))
    colocated = simulate(RunConfig(policy="vllm", max_requests=10, rate=4.0))
    assert np.array_equal(pdres.requests["output_hash"], colocated.requests["output_hash"])
    assert (pdres.requests["num_output_tokens"] == colocated.requests["num_output_tokens"]).all()


def test_the_output_folder_draws_the_transfers(tmp_path) -> None:
    from schedsim.outputs.cluster_plots import TRANSFER_PLOT, write_cluster_plots

    res = simulate(hand_config(), workload=two_requests())
    written = write_cluster_plots(res, tmp_path)
    assert tmp_path / TRANSFER_PLOT in written and (tmp_path / TRANSFER_PLOT).stat().st_size > 0

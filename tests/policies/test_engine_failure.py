"""An engine's own failure is a finding with its fields (step, requests, cause), and it crosses a
process pool whole: a sweep's workers hand it back as it was raised."""

from __future__ import annotations

import pickle

import pytest
from schedsim.policies import EngineFailure
from schedsim.policies.trtllm import KvCacheExhausted, SchedulerWedged, TokenBudgetExceeded, TrtllmFailure

pytestmark = pytest.mark.pure_python


@pytest.mark.parametrize("cls", [SchedulerWedged, KvCacheExhausted, TokenBudgetExceeded])
def test_a_trtllm_failure_round_trips_through_pickle(cls: type[TrtllmFailure]) -> None:
    exc = cls(7, ["r1", "r2"], "request r1 needs 3 blocks, 2 are free")
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is cls and isinstance(back, EngineFailure)
    assert (back.step, back.request_ids, back.message) == (7, ["r1", "r2"], exc.message)
    assert str(back) == "step 7: request r1 needs 3 blocks, 2 are free"
    assert back.report() == f"TensorRT-LLM itself fails here ({cls.cause}), {back}"


def test_each_cause_has_its_own_tag() -> None:
    causes = {SchedulerWedged.cause, KvCacheExhausted.cause, TokenBudgetExceeded.cause}
    assert len(causes) == 3 and EngineFailure.cause not in causes


def test_a_copy_from_its_args_is_the_same_failure() -> None:
    # how SimPy re-raises the failure of a process nobody waits on (a cluster's replica)
    exc = SchedulerWedged(3, ["r9"], "nothing can be scheduled again")
    copy = type(exc)(*exc.args)
    assert (copy.step, copy.request_ids, copy.message, str(copy)) == (3, ["r9"], exc.message, str(exc))

"""The real backend's workload: small by default, announced, prompts clipped to the model's context."""

from __future__ import annotations

import sys

import pandas as pd
import pytest
from schedsim import RunConfig
from schedsim.run.real import progress_bar
from schedsim.run.real_workload import DEFAULT_REAL_REQUESTS, clip_prompts, real_workload
from schedsim.traces import load_workload

pytestmark = pytest.mark.pure_python


def test_the_default_is_the_first_requests_of_the_trace_announced_in_one_line():
    chosen = real_workload(RunConfig(), None, max_model_len=4096)
    full = load_workload("azure-conv-2023")
    assert len(chosen.frame) == DEFAULT_REAL_REQUESTS == 32
    assert chosen.frame["request_id"].tolist() == full["request_id"].head(32).tolist()
    line = chosen.description
    assert "\n" not in line and f"the first 32 of {len(full)} requests of azure-conv-2023" in line
    assert "--full-trace" in line
    # two of the first 32 prompts are longer than 4096 minus their outputs
    assert chosen.num_clipped == 2 and "2 prompt(s) clipped to fit the model's 4096-token context" in line
    assert ((chosen.frame.prompt_tokens + chosen.frame.output_tokens) <= 4096).all()


def test_the_full_trace_or_an_explicit_count_only_when_asked():
    assert len(real_workload(RunConfig(max_requests=5), None, 4096).frame) == 5
    assert len(real_workload(RunConfig(max_requests=50), None, 4096).frame) == 50
    rows = load_workload("azure-conv-2023").head(100)
    full = real_workload(RunConfig(), rows, 4096, full_trace=True)
    assert len(full.frame) == 100 and "first" not in full.description
    assert len(real_workload(RunConfig(), rows, 4096).frame) == 32


def test_clipping_keeps_prompt_plus_output_within_the_context_and_leaves_short_rows_alone():
    df = pd.DataFrame({"prompt_tokens": [10, 500, 90], "output_tokens": [5, 20, 300]})
    out, n = clip_prompts(df, 128)
    assert n == 2
    assert out.prompt_tokens.tolist() == [10, 108, 64]  # outputs keep at most half the context
    assert df.prompt_tokens.tolist() == [10, 500, 90]  # the caller's frame is untouched
    same, none = clip_prompts(df.iloc[:1], 128)
    assert none == 0 and same is not None and same.prompt_tokens.tolist() == [10]


def test_the_progress_bar_shows_only_on_a_terminal(monkeypatch):
    assert progress_bar(3, True).disable  # pytest's stderr is not a terminal
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    bar = progress_bar(3, True)
    assert not bar.disable
    bar.close()
    assert progress_bar(3, False).disable

"""What a fast-forward jump writes into the metrics recorder: the rows k ordinary iterations write."""

from __future__ import annotations

from schedsim.fastforward.timeline import StretchTimes
from schedsim.metrics.recorder import MetricsRecorder
from schedsim.policies import Request


def commit_metrics(
    m: MetricsRecorder,
    reqs: list[Request],
    idx0: int,
    k: int,
    t: StretchTimes,
    usage: list[float],
    waiting: list[float],
    is_async: bool,
) -> None:
    """Steps rows, timeline intervals and per-request token times of k steady iterations (`waiting`:
    the requests waiting after each schedule; the head-of-line tracker has judged each): the jump
    is recorded (its steps rows placed by metrics_rows, both expanded with the tables by
    metrics_jumps); the token times are the live requests' own."""
    n = len(reqs)
    assert len(m.steps["schedule_time"]) + m.rows.jumped == idx0, "steps reported in launch order"
    m.rows.add_jump(idx0, k)
    n_last = t.last_n if t.last_n >= 0 else n  # the last schedule may leave some out
    m.jumps.add(
        [len(m.cpu_timeline[1]), len(m.gpu_timeline[0]), idx0, k, 1 if is_async else 0, n, n_last],
        [t.s, t.p, t.d0, t.u0, t.d, t.u, t.s_last, t.p_last, t.poll0],
        [t.start, t.gpu, t.wait, usage, waiting],
    )
    _token_times(m, reqs, k, t.update)


def _token_times(m: MetricsRecorder, reqs: list[Request], k: int, update: list[float]) -> None:
    """First-token times, inter-token gaps (update-major, running order) and their running sums."""
    gaps, n, stats = m.itl_gaps, len(reqs), m.stats
    u0, u_last = update[0], update[-1]
    diffs = [update[i] - update[i - 1] for i in range(1, k)]  # every request's gap from then on
    record_itl = m.record_itl
    seen: list[int] = []
    rows: list[int] = []
    for r in reqs:  # first update of the stretch, in running order; then each request's sum
        st = stats[r.request_id]
        c = st.num_out
        total = st.itl_sum
        if c:
            g = u0 - st.last_token
            gaps.append(g)
            total += g
            st.itl_n += k
        else:
            st.first_token = u0
            st.itl_n += k - 1
        for x in diffs:  # the same additions, in the same order, as k ordinary updates
            total += x
        st.itl_sum = total
        st.last_token = u_last
        st.num_out = c + k
        if record_itl:
            seen.append(c)
            rows.append(st.row)
    for x in diffs:
        gaps.append_run(x, n)
    if record_itl:
        ids, pos, tms = m.itl_rows
        for i in range(k):
            ids.extend(rows)
            pos.extend([c + i for c in seen])
            tms.extend([update[i]] * n)

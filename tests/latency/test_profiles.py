"""Profile import (Vidur format -> tidy), shipped profiles, and the roofline fit recovering truth."""

import pandas as pd
import pytest
from schedsim.latency import RooflineModel, get_gpu_spec, get_model_spec
from schedsim.latency.calibration import fit_roofline
from schedsim.latency.fit_roofline import fit_all_reduce, fit_operators
from schedsim.latency.profiles import (
    Profiles,
    compute_file,
    import_vidur,
    read_profiles,
    shipped_profile_keys,
    shipped_profiles,
    write_profiles,
)

OPS = ["attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj", "input_layernorm", "mlp_act", "add"]


def test_import_vidur_to_tidy_roundtrip(tmp_path, vidur_tree, truth_config):
    vidur_tree(tmp_path / "vidur")
    prof = import_vidur(tmp_path / "vidur")
    assert prof.keys() == [("llama-2-7b", "h100-sxm", 1), ("llama-2-7b", "h100-sxm", 2)]
    row = prof.compute[
        (prof.compute.op == "add") & (prof.compute.tp == 1) & (prof.compute.num_tokens == 4096)
    ]
    assert len(row) == 1  # duplicates collapse to their median
    rl = RooflineModel(get_model_spec("llama-2-7b"), get_gpu_spec("h100-sxm"), 1, truth_config)
    assert row.time_s.iloc[0] == pytest.approx(rl.work_time(*rl.op_work(4096)["add"], "add"))
    assert set(prof.network.num_workers) == {2, 4}
    write_profiles(prof, tmp_path / "tidy")
    back = read_profiles(tmp_path / "tidy")
    assert back.compute.shape == prof.compute.shape and back.keys() == prof.keys()


def _compute_rows(model: str, n: int) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "gpu": "h100-sxm",
            "model": model,
            "tp": 1,
            "op": "add",
            "num_tokens": range(1, n + 1),
            "time_s": [1e-5 * (i + 1) for i in range(n)],
        }
    )


def test_compute_rows_are_written_per_model_and_read_per_model(tmp_path):
    """A run parses its own model's rows only: one compute file per model, read by name."""
    a, b = _compute_rows("llama-2-7b", 3), _compute_rows("phi-2", 2)
    prof = Profiles(pd.concat([a, b], ignore_index=True), pd.DataFrame(), pd.DataFrame())
    write_profiles(prof, tmp_path)
    assert sorted(p.name for p in tmp_path.glob("profile_compute*")) == [
        "profile_compute.llama-2-7b.csv.gz",
        "profile_compute.phi-2.csv.gz",
    ]
    pd.testing.assert_frame_equal(read_profiles(tmp_path, ["phi-2"]).compute, b)
    pd.testing.assert_frame_equal(read_profiles(tmp_path).compute, prof.compute)
    assert read_profiles(tmp_path, ["llama-2-7b"], ("network",)).compute.empty
    assert read_profiles(tmp_path, ["no-such-model"]).compute.empty
    write_profiles(Profiles(a, pd.DataFrame(), pd.DataFrame()), tmp_path)  # rewritten: phi-2 is gone
    assert read_profiles(tmp_path).keys() == [("llama-2-7b", "h100-sxm", 1)]


def test_a_whole_compute_table_in_one_file_is_read_too(tmp_path):
    a, b = _compute_rows("llama-2-7b", 3), _compute_rows("phi-2", 2)
    pd.concat([a, b], ignore_index=True).to_csv(tmp_path / "profile_compute.csv.gz", index=False)
    pd.testing.assert_frame_equal(read_profiles(tmp_path, ["phi-2"]).compute, b)
    assert read_profiles(tmp_path).keys() == [("llama-2-7b", "h100-sxm", 1), ("phi-2", "h100-sxm", 1)]


def test_profile_reading_refuses_unknown_tables_and_unsafe_model_names(tmp_path):
    with pytest.raises(ValueError, match=r"unknown profile table\(s\) \['kernels'\]"):
        read_profiles(tmp_path, tables=("compute", "kernels"))
    with pytest.raises(ValueError, match="cannot name a profile file"):
        compute_file("../llama")
    assert compute_file("llama-2-7b") == "profile_compute.llama-2-7b.csv.gz"


def test_import_drops_physically_impossible_rows_with_a_warning(tmp_path, vidur_tree, mlp_frame):
    bogus = mlp_frame(1, repeats=1).iloc[[-1]].copy()
    bogus["num_tokens"] = 3000
    bogus["time_stats.mlp_up_proj.median"] = 0.002  # 2 us for a 3000-token GEMM
    vidur_tree(tmp_path / "v", bogus)
    with pytest.warns(UserWarning, match="dropped 1 measurement"):
        prof = import_vidur(tmp_path / "v")
    assert not ((prof.compute.num_tokens == 3000) & (prof.compute.op == "mlp_up_proj")).any()


def test_import_errors_name_the_file(tmp_path, mlp_frame):
    folder = tmp_path / "compute" / "h100" / "acme" / "unknown-model"
    folder.mkdir(parents=True)
    mlp_frame(1).to_csv(folder / "mlp.csv", index=False)
    with pytest.raises(ValueError, match="no shipped model spec for Vidur model 'acme/unknown-model'"):
        import_vidur(tmp_path)
    with pytest.raises(ValueError, match="no Vidur-format profiles"):
        import_vidur(tmp_path / "compute" / "empty")


def test_shipped_profiles_cover_vidur_models_and_keep_licence():
    prof = shipped_profiles()
    keys = prof.keys()
    assert len(keys) == 51
    assert ("llama-2-70b", "h100-sxm", 8) in keys and ("llama-3-70b", "a100-80gb", 4) in keys
    assert (prof.compute.time_s > 0).all()
    assert {"h100_dgx", "a100_dgx"} <= set(prof.network.node)
    assert set(prof.attention.phase) == {"prefill", "decode"}
    from importlib import resources

    lic = resources.files("schedsim.latency").joinpath("data", "LICENSES", "vidur-MIT.txt")
    assert "MIT License" in lic.read_text()


def test_fit_recovers_known_efficiencies(mlp_frame):
    df = pd.concat([mlp_frame(1, 1), mlp_frame(2, 1)], ignore_index=True)
    rows = []
    for op in OPS:
        rows.append(
            pd.DataFrame(
                {
                    "gpu": "h100-sxm",
                    "model": "llama-2-7b",
                    "tp": df.num_tensor_parallel_workers,
                    "op": op,
                    "num_tokens": df.num_tokens,
                    "time_s": df[f"time_stats.{op}.median"] * 1e-3,
                }
            )
        )
    prof = Profiles(pd.concat(rows, ignore_index=True), pd.DataFrame(), pd.DataFrame())
    params, errors = fit_operators(prof, "h100-sxm")
    assert params["gemm_compute_eff"] == pytest.approx(0.55, rel=0.03)
    assert params["gemm_memory_eff"] == pytest.approx(0.7, rel=0.03)
    assert params["kernel_overhead_us"] == pytest.approx(3.0, abs=0.2)
    assert params["gemm_overhead_us"] == pytest.approx(6.0, abs=0.3)
    assert params["gemm_blend_p"] == pytest.approx(2.0, rel=0.05)
    assert params["op_memory_eff"]["add"] == pytest.approx(0.8, rel=0.03)
    assert all(e["median_rel_err"] < 0.02 for e in errors.values())
    cal = fit_roofline(prof)
    assert cal["kind"] == "roofline-fit" and set(cal["gpus"]) == {"h100-sxm"}


def test_all_reduce_fit_recovers_bandwidth_and_latency(tmp_path, vidur_tree):
    vidur_tree(tmp_path / "v")
    prof = import_vidur(tmp_path / "v")
    params, errors = fit_all_reduce(prof, "h100-sxm")
    assert params["comm_latency_us"] == pytest.approx(20.0, rel=0.05)
    assert set(errors) == {"all_reduce_tp2", "all_reduce_tp4"}


def test_interpolation_holdout_is_exact_on_piecewise_linear_data():
    from schedsim.latency.accuracy import interpolation_holdout, summarize_errors

    xs = [1, 2, 3, 4, 5, 6, 7]
    comp = pd.DataFrame(
        {
            "gpu": "h100-sxm",
            "model": "llama-2-7b",
            "tp": 1,
            "op": "add",
            "num_tokens": xs,
            "time_s": [1e-6 * x for x in xs],
        }
    )
    pts = interpolation_holdout(Profiles(comp, pd.DataFrame(), pd.DataFrame()))
    assert sorted(pts.num_tokens) == [2, 4, 6]
    assert summarize_errors(pts).median_rel_err.max() < 1e-9


def test_shipped_profile_keys_file_matches_the_tables() -> None:
    """profile_keys.json lets runs without a measured profile skip parsing the tables: it must
    list exactly the (model, gpu, tp) triples the shipped tables cover."""
    assert shipped_profile_keys() == frozenset(shipped_profiles().keys())

"""The extended physics (MoE, MLA, cp, recipes, sharding, NVL72: `surrogate.extended`) gives the
same features compiled row by row (`surrogate.extended_kernel`) as with numpy over the table,
and its vectors are read at the positions `surrogate.slots` names.

The numpy side runs in a subprocess with VTRAIN_NO_JIT=1 (the switch is made once per process,
`simulator.jit`); both sides draw the same plans of the MoE + cp space (seeded), every GPU of it,
without simulating them (features need no labels)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from simulator.jit import HAVE_NUMBA
from surrogate import slots
from surrogate.extended import EXTENDED_PHYSICS
from surrogate.kernel import PHYSICS_FEATURES
from surrogate.physics import ROW_FIELDS
from surrogate.records import NEW_COLUMNS

ROOT = Path(__file__).resolve().parents[2]

_FEATURES = """
import sys, numpy as np
from simulator.jit import HAVE_NUMBA
from surrogate.encoding import feature_matrix
from surrogate.features import JOB_COLUMNS
from surrogate.hardware import catalog_hardware
from surrogate.sampling import draw
from surrogate.space import load_space
space = load_space("data/spaces/moe_cp.yaml")
hardware = {name: catalog_hardware(name) for name in space.hardware}
records = draw(space, hardware, int(sys.argv[2]), seed=7).records
columns = {c: np.array([r[c] for r in records]) for c in JOB_COLUMNS}
_, x = feature_matrix(columns, hardware)
one = feature_matrix({c: v[:1] for c, v in columns.items()}, hardware)[1]
np.savez(sys.argv[1], x=np.ascontiguousarray(x), one=one, numba=HAVE_NUMBA,
         moe=np.array([r["num_experts"] > 0 for r in records]), cp=np.array([r["cp"] > 1 for r in records]))
"""


def _features(out: Path, n: int, jit: bool) -> dict[str, np.ndarray]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("VTRAIN_NO_JIT", None)
    if not jit:
        env["VTRAIN_NO_JIT"] = "1"
    subprocess.run([sys.executable, "-c", _FEATURES, str(out), str(n)], check=True, cwd=ROOT,
                   env=env, timeout=600)
    return dict(np.load(out))


@pytest.mark.skipif(not HAVE_NUMBA, reason="numba is not installed: only the numpy path exists")
def test_compiled_extended_features_equal_the_numpy_ones_to_the_bit(tmp_path) -> None:
    compiled = _features(tmp_path / "compiled.npz", 400, jit=True)
    plain = _features(tmp_path / "numpy.npz", 400, jit=False)
    assert bool(compiled["numba"]) and not bool(plain["numba"])
    # the draw exercises what the kernel computes: MoE rows, cp rows and dense rows beside them
    assert compiled["moe"].any() and (~compiled["moe"]).any() and compiled["cp"].any()
    np.testing.assert_array_equal(compiled["x"], plain["x"])
    np.testing.assert_array_equal(compiled["one"], plain["one"])
    np.testing.assert_array_equal(compiled["one"][0], compiled["x"][0])


def test_each_row_slot_is_the_position_of_its_field() -> None:
    for name in ROW_FIELDS:
        constant = "RECOMPUTE_CODE" if name == "recompute" else name.upper()
        if hasattr(slots, constant):
            assert getattr(slots, constant) == ROW_FIELDS.index(name), name
    for name in NEW_COLUMNS:
        if hasattr(slots, name.upper()):
            assert getattr(slots, name.upper()) == NEW_COLUMNS.index(name), name


def test_each_dense_slot_names_a_physics_feature_the_extended_physics_reads() -> None:
    assert set(slots.DENSE_READ) <= set(PHYSICS_FEATURES)
    expected = {"D_PARAMS": "params", "D_MODEL_FLOPS": "model_flops", "D_STAGE_PARAMS": "stage_params",
                "D_EST_LOG_TIME": "est_log_time_s", "D_EST_LOG_MEMORY": "est_log_memory_bytes",
                "D_LAYER_COMPUTE": "time_layer_compute_s", "D_HOST_EXCESS": "time_host_excess_s",
                "D_TP_COMM": "time_tp_comm_s", "D_ATTENTION": "time_attention_s",
                "D_PEAK_BF16": "hw_peak_bf16", "D_DP_COMM": "time_dp_comm_s",
                "D_STAGE_MB": "time_stage_mb_s", "D_LAYER": "time_layer_s",
                "D_LAYER_HOST": "time_layer_host_s", "D_RECOMPUTE": "time_recompute_s",
                "D_TP_OVERLAP_SAVING": "time_tp_overlap_saving_s", "D_ACTIVATIONS": "activation_bytes",
                "D_WEIGHT_STATES": "weight_state_bytes", "D_GEMM_EFFICIENCY": "gemm_efficiency",
                "D_LAYER_SAVED": "layer_saved_bytes", "D_DP_EXPOSED": "time_dp_exposed_s",
                "D_OPTIMIZER": "time_optimizer_s", "D_MEM_FIRST": "mem_first_bytes",
                "D_MEM_LAST": "mem_last_bytes"}
    assert len(expected) == len(slots.DENSE_READ)
    for constant, name in expected.items():
        assert slots.DENSE_READ[getattr(slots, constant)] == name


def test_the_lookup_and_model_slots_cover_their_rows_once() -> None:
    lookups = sorted(getattr(slots, c) for c in dir(slots) if c.startswith("A_"))
    models = sorted(getattr(slots, c) for c in dir(slots) if c.startswith("M_"))
    assert lookups == list(range(len(slots.LOOKUPS)))
    assert models == list(range(len(slots.MODEL_VALUES)))
    assert len(EXTENDED_PHYSICS) == len(set(EXTENDED_PHYSICS))


def test_one_record_has_the_features_of_its_row_in_a_table() -> None:
    """`Surrogate.predict_one`'s path (`features_of_record`: compiled, its lookups made from the
    record's own values) gives every MoE, cp and recipe plan its table row's features."""
    from surrogate.encoding import feature_matrix, features_of_record
    from surrogate.features import JOB_COLUMNS
    from surrogate.hardware import catalog_hardware
    from surrogate.physics import HW_FIELDS, hardware_vector
    from surrogate.sampling import draw
    from surrogate.space import load_space

    space = load_space(ROOT / "data" / "spaces" / "moe_cp.yaml")
    hardware = {name: catalog_hardware(name) for name in space.hardware}
    records = draw(space, hardware, 150, seed=11).records
    assert any(r["num_experts"] for r in records) and any(r["cp"] > 1 for r in records)
    assert any(r["precision"] in ("fp8", "fp4") for r in records)
    _, table = feature_matrix({c: np.array([r[c] for r in records]) for c in JOB_COLUMNS}, hardware)
    vectors = {n: np.array([hardware_vector(s)[k] for k in HW_FIELDS]) for n, s in hardware.items()}
    for i, record in enumerate(records):
        one = features_of_record(record, vectors[record["gpu"]], hardware)
        np.testing.assert_array_equal(one[0], table[i], err_msg=str(record))


def test_one_plan_is_predicted_as_its_row_of_a_batch_whichever_way_it_is_asked(tiny_model) -> None:
    """`predict_one`, `predict([job])` and a one-row DataFrame (a search scores its trials one plan
    at a time: the record path and the walked trees) give a batch's numbers to the bit."""
    import warnings

    import pandas as pd

    from surrogate.encoding import OutOfSpaceWarning
    from surrogate.features import JOB_COLUMNS, record_to_job
    from surrogate.hardware import catalog_hardware
    from surrogate.sampling import draw
    from surrogate.space import load_space

    model = tiny_model.model
    space = load_space(ROOT / "data" / "spaces" / "moe_cp.yaml").model_copy(
        update={"hardware": ("a100-80gb",)})
    records = draw(space, {"a100-80gb": catalog_hardware("a100-80gb")}, 40, seed=5).records
    assert any(r["num_experts"] for r in records) and any(r["cp"] > 1 for r in records)
    table = pd.DataFrame(records)[list(JOB_COLUMNS)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OutOfSpaceWarning)
        batch = model.predict(table)
        for i, record in enumerate(records):
            job = record_to_job(record, model.hardware_)
            expected = batch.iloc[i]
            one = model.predict_one(job)
            listed = model.predict([job]).iloc[0]
            row = model.predict(table.iloc[[i]]).iloc[0]
            for got in (one, listed, row):
                assert got["iteration_time_s"] == expected["iteration_time_s"], record
                assert got["peak_memory_bytes"] == expected["peak_memory_bytes"], record
                assert bool(got["fits_in_memory"]) == bool(expected["fits_in_memory"])

"""data/published/: every number has a source, a licence and a provenance; it never mixes with recordings."""

import json

import pandas as pd
import pytest

from gpucourse.errors import InvalidConfig
from gpucourse.measure import published
from gpucourse.measure.reference import REFERENCE_ROOT

SOURCES = published.source_ids()


def test_the_course_cites_published_sources():
    assert {"gpu-benches-stream", "sgemm-cuda", "ml-engineering-mamf"} <= set(SOURCES)


@pytest.mark.parametrize("source_id", SOURCES)
def test_provenance_is_complete(source_id):
    prov = published.provenance(source_id)
    missing = [f for f in published.REQUIRED_FIELDS if not prov.get(f)]
    assert not missing, f"{source_id}: provenance lacks {missing}"
    assert prov["source_id"] == source_id
    assert len(prov["commit"]) == 40 and all(c in "0123456789abcdef" for c in prov["commit"])
    assert prov["repository"].startswith("https://")


@pytest.mark.parametrize("source_id", SOURCES)
def test_every_row_has_a_source_and_documented_columns(source_id):
    prov = published.provenance(source_id)
    assert published.tables(source_id), f"{source_id} has no CSV"
    for table in published.tables(source_id):
        data = published.load(source_id, table)
        assert len(data) > 0
        assert set(data.columns) == set(prov["columns"]), f"{table}: columns differ from provenance"
        assert not data.isna().all(axis=1).any()
        gpu_column = next((c for c in ("gpu", "accelerator") if c in data.columns), None)
        if gpu_column:  # every row names a GPU listed in the provenance
            assert set(data[gpu_column]) <= set(prov["gpus"]), f"{table}: a row's GPU is not in provenance"
        if "source_file" in data.columns:  # every row names a file listed in the provenance
            assert set(data["source_file"]) <= set(prov["paths"])


def test_published_numbers_stay_out_of_the_recordings():
    assert published.PUBLISHED_ROOT.resolve() != REFERENCE_ROOT.resolve()
    assert not REFERENCE_ROOT.resolve().is_relative_to(published.PUBLISHED_ROOT.resolve())
    for path in REFERENCE_ROOT.glob("*/provenance.json"):
        assert "repository" not in json.loads(path.read_text()), f"{path} looks like a published source"


def test_caption_names_the_source_and_says_not_your_gpu():
    text = published.caption("sgemm-cuda")
    assert "siboehm" in text and "RTX A6000" in text and "MIT" in text and "not your GPU" in text


def test_known_values_round_trip():
    # Spot checks against the sources' own text (SGEMM_CUDA README at the recorded commit;
    # gpu-benches gpu-stream/h200.txt, first and last rows of the scale column).
    sgemm = published.load("sgemm-cuda", "sgemm_4096_rtx_a6000").set_index("kernel_number")
    assert sgemm.loc[0, "gflops"] == 23249.6 and sgemm.loc[3, "percent_of_cublas"] == 12.8
    stream = published.load("gpu-benches-stream", "scale_gbps_vs_occupancy")
    h200 = stream[stream.gpu == "NVIDIA H200"].set_index("block_threads")
    assert h200.loc[32, "scale_gbps"] == 240.0 and h200.loc[32, "occupancy_percent"] == 3.0
    assert h200.index.max() == 1024 and isinstance(stream, pd.DataFrame)


def test_unknown_source_or_table_is_one_clear_error():
    with pytest.raises(InvalidConfig, match="known:"):
        published.provenance("no-such-source")
    with pytest.raises(InvalidConfig, match="has no table"):
        published.load("sgemm-cuda", "nope")


def test_the_index_lists_every_source_with_its_provenance_and_licence():
    index = pd.read_csv(published.PUBLISHED_ROOT / "sources.csv")
    assert sorted(index.source_id) == SOURCES
    for row in index.itertuples():
        assert (published.PUBLISHED_ROOT / row.provenance).is_file()
        assert published.provenance(row.source_id)["licence"].split(" ")[0] in row.licence

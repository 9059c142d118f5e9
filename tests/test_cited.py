"""gpucourse.viz.cited: published measurements drawn beside the models, each named and captioned."""

import pytest

from gpucourse.measure import published
from gpucourse.viz import charts, cited


def _fig():
    return charts.figure("t", "occupancy (%)", "speed ÷ speed at 100 % (×)", charts.source_caption("model"))


def test_stream_series_one_per_gpu_relative_to_their_own_best():
    fig = cited.stream_vs_occupancy(_fig())
    names = [t.name for t in fig.data]
    assert len(names) == 4 and all(n.startswith("published: ") and "te42kyfo" in n for n in names)
    for trace in fig.data:
        assert list(trace.y)[-1] == pytest.approx(1.0) and max(trace.y) < 1.2  # ÷ its GB/s at its top occupancy
        assert "GB/s" in trace.hovertemplate and max(trace.customdata) > 500  # GB/s kept for the hover
    assert cited.stream_best_gbps("NVIDIA H200") == 3165.0  # h200.txt's best scale-kernel figure
    with pytest.raises(KeyError):
        cited.stream_best_gbps("NVIDIA B200")


def test_sgemm_ladder_and_the_share_tiling_alone_reaches():
    assert cited.sgemm_tiling_share() == pytest.approx(0.128)
    fig = cited.sgemm_ladder(_fig(), fraction=True)
    shares = {t.name: t.y[0] for t in fig.data}
    assert shares["published: cuBLAS (SGEMM_CUDA, RTX A6000)"] == 1.0
    assert shares["published: SMEM Caching (SGEMM_CUDA, RTX A6000)"] == pytest.approx(0.128)
    assert all(t.x[0] == 4096 for t in fig.data)


def test_h200_rows_of_the_mamf_table():
    found = cited.h200_mamf()
    assert found["bf16"] == ("NVIDIA H100 SXM", 794.5)  # the table's note on this row: "H200 is the same"
    assert found["fp8_e4m3"] == ("NVIDIA H200 SXM", 1453.4)
    assert cited.mamf("NVIDIA H200 SXM", "fp32") is None
    gbps, tflops, label = cited.h200_roof("bf16")
    assert (gbps, tflops) == (3165.0, 794.5) and "gpu-stream" in label and "ml-engineering" in label
    assert cited.h200_roof("fp32") is None


@pytest.mark.parametrize("source_id", published.source_ids())
def test_a_cited_caption_names_who_gpu_software_source_licence_and_the_difference(source_id):
    prov = published.provenance(source_id)
    fig = cited.cite(_fig(), "Model (dashed)", source_id)
    text = charts.caption_of(fig)
    assert text.startswith("Model (dashed). Published by ")
    for needed in (prov["measured_by"], prov["gpus"][0], cited.software(source_id), prov["repository"],
                   prov["commit"][:7], prov["licence"].split(" (")[0], prov["differs_from_course"], "not your GPU"):
        assert needed in text, needed


def test_because_says_why_and_the_notes_under_the_plot_do_not_overlap():
    fig = _fig()
    fig.add_annotation(name="model", text="a<br>b", showarrow=False, xref="paper", yref="paper", x=0, y=0,
                       yshift=-80, xanchor="left", yanchor="top")
    cited.because(fig, "divergence", "Dotted: the model")
    assert charts.caption_of(fig).startswith("Dotted: the model. Model and counts only, because no published")
    source = next(a for a in fig.layout.annotations if a.name == "source")
    model = next(a for a in fig.layout.annotations if a.name == "model")
    lines = source.text.count("<br>") + 1
    assert lines >= 2 and model.yshift <= source.yshift - 16 * lines
    assert fig.layout.margin.b >= -model.yshift + 2 * 16
    with pytest.raises(KeyError):
        cited.because(_fig(), "no such topic")

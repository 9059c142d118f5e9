"""The tensor-core lesson's tables and charts: one kernel, three generations, side by side; the fragment
picture; the roofline with tensor-core roofs; the explorer (tile, stages, warps → resources and instructions).

Every compiled fact comes through ``recordings.compiled_facts``: compiled now where Triton is installed,
the committed CPU recording elsewhere, and every table and caption says which.
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from gpucourse.errors import InvalidConfig
from gpucourse.hardware import WARP_SIZE
from gpucourse.lessons.occupancy import calculator
from gpucourse.lessons.tensorcores import recordings
from gpucourse.lessons.tensorcores.model import GENERATIONS
from gpucourse.microscope import fragments
from gpucourse.viz import charts, cited

KIB = 1024
MAX_REGISTERS_PER_THREAD = 255  # every cc from 5.0 on (CUDA C++ Programming Guide, "Technical Specifications")


def generations_table(dtype: str = "float16", ccs=tuple(GENERATIONS), tile=recordings.DEFAULT_CONFIG["tile"],
                      num_warps: int = 4, num_stages: int = 3) -> pd.DataFrame:
    """One row per compute capability: who issues the mma, its PTX and SASS, registers, shared memory,
    and where the row comes from (compiled now, or the recording)."""
    rows = []
    for cc in ccs:
        facts, source = recordings.compiled_facts(cc, dtype, tile, num_warps, num_stages)
        rows.append({"GPU": facts.generation, "issued by": GENERATIONS[facts.cc].issued_by,
                     "PTX": ", ".join(f"{k} ×{v}" for k, v in facts.ptx.items()),
                     "SASS": ", ".join(f"{k} ×{v}" for k, v in facts.sass.items()),
                     "mma opcodes": ", ".join(facts.mma_opcodes), "registers": facts.registers,
                     "stack B": facts.stack_bytes, "shared B": facts.shared_bytes,
                     "tensor memory columns": facts.tmem_columns, "from": source})
    return pd.DataFrame(rows)


def stage_bytes(tile, dtype_bytes: int = 2) -> int:
    """Shared memory one pipeline stage holds: an A tile (BLOCK_M×BLOCK_K) and a B tile (BLOCK_K×BLOCK_N)."""
    block_m, block_n, block_k = tile
    return (block_m * block_k + block_k * block_n) * dtype_bytes


# --- the fragment picture (microscope) ----------------------------------------------------------------------

def fragment_figure(operand: str = "a", shape: str = "m16n8k16", dtype: str = "f16") -> go.Figure:
    """Which lane holds which element of one ``mma.sync`` operand (sm_80's instruction; also sm_86/89/120):
    each cell coloured by its lane, labelled "T<lane> <slot>", from the PTX ISA's table (the microscope)."""
    mma = fragments.mma_shape(shape, dtype)
    owner = mma.owners(operand)  # rows × cols × (lane, slot); raises on a bad operand
    labels = fragments.owner_labels(mma, operand)
    rows, cols = mma.operand_shape(operand)
    name = {"a": "A", "b": "B", "c": "C/D"}[operand.lower()]
    fig = charts.figure(f"mma.sync.{shape} ({dtype}): who holds {name} ({rows}×{cols}) — sm_80 and later warps",
                        "column (element index)", "row (element index)", f"Counted by the microscope: the PTX ISA's "
                        f"fragment table ({fragments.FRAGMENT_SOURCES[shape]}); exact, no GPU involved", height=520)
    groups = WARP_SIZE // 4  # groupID = lane >> 2: eight groups of four lanes, one palette colour each
    scale = [[g / (groups - 1), charts.PALETTE[g % len(charts.PALETTE)]] for g in range(groups)]
    fig.add_heatmap(z=owner[..., 0] // 4, text=labels, texttemplate="%{text}", textfont={"size": 9},
                    colorscale=scale, zmin=0, zmax=groups - 1, showscale=False, xgap=1, ygap=1,
                    x=list(range(cols)), y=list(range(rows)), name=f"{name}: coloured by group (lane >> 2)",
                    hovertemplate="row %{y}, column %{x}: %{text}<extra></extra>")
    fig.update_yaxes(autorange="reversed", dtick=1)
    fig.update_xaxes(dtick=1, side="top")
    return fig


def lane_elements(lane: int, operand: str = "a", shape: str = "m16n8k16", dtype: str = "f16") -> list[tuple]:
    """(slot, row, column) of every element ``lane`` holds: one lane's view of the picture."""
    mma = fragments.mma_shape(shape, dtype)
    return [(slot, int(r), int(c)) for slot, (r, c) in enumerate(mma.layout(operand)[lane])]


# --- the roofline with tensor-core roofs --------------------------------------------------------------------

# One datacentre GPU per generation, as the published tables name them; bandwidth where gpu-stream has it
ROOF_GPUS = {
    80: {"mamf": "NVIDIA A100 SXM", "stream": "NVIDIA A100 80GB"},
    90: {"mamf": cited.H200_MAMF_ROWS["bf16"], "stream": "NVIDIA H200"},  # H100 SXM's row: "H200 is the same"
    100: {"mamf": "NVIDIA B200 SXM", "stream": None},  # gpu-stream has no Blackwell
}


def _datasheet(accelerator: str, dtype: str = "bf16") -> float | None:
    from gpucourse.measure import published

    data = published.load(cited.MAMF, "mamf_tflops")
    part = data[(data.accelerator == accelerator) & (data.dtype == cited.MAMF_DTYPES.get(dtype, dtype))]
    return float(part.datasheet_tflops.iloc[0]) if len(part) else None


def roofs_table() -> pd.DataFrame:
    """Per generation: the dense bf16 tensor-core peak (datasheet, as ml-engineering lists it), the published
    maximum achievable matmul, the published streaming bandwidth (where there is one) and the ridge point."""
    rows = []
    for cc, where in ROOF_GPUS.items():
        mamf = cited.mamf(where["mamf"], "bf16")
        gbps = cited.stream_best_gbps(where["stream"]) if where["stream"] else None
        rows.append({"generation": GENERATIONS[cc].name, "GPU (matmul row)": where["mamf"].removeprefix("NVIDIA "),
                     "datasheet bf16 TFLOP/s": _datasheet(where["mamf"]), "max achievable bf16 TFLOP/s": mamf,
                     "achievable / datasheet": round(mamf / _datasheet(where["mamf"]), 2),
                     "GPU (bandwidth row)": where["stream"].removeprefix("NVIDIA ") if where["stream"] else "—",
                     "streaming GB/s": gbps,
                     "ridge point (FLOP/byte)": round(mamf * 1e12 / (gbps * 1e9)) if gbps else None,
                     "sources": "ml-engineering (MAMF, datasheet column)" + (", gpu-stream" if gbps else "")})
    return pd.DataFrame(rows)


def matmul_intensity(n: int, in_bytes: int = 2, out_bytes: int = 4) -> float:
    """FLOP per byte of an n³ matmul that reads A and B once and writes C once: 2n³ / (2·n²·in + n²·out)."""
    if n < 1:
        raise InvalidConfig(f"n must be ≥ 1, got {n}")
    return 2 * n**3 / (2 * n * n * in_bytes + n * n * out_bytes)


def roofline_figure(n: int = 4096) -> go.Figure:
    """Lesson 00's roofline with a tensor-core roof per generation (published, cited), and where an n³
    fp16 matmul (fp32 C) and a vector add sit."""
    table = roofs_table()
    xs = np.logspace(-2, 4, 61)
    fig = charts.figure("The roofline with tensor-core roofs: sm_80, sm_90, sm_100 (bf16, published)",
                        "arithmetic intensity (FLOP/byte)", "throughput (TFLOP/s)", "")
    for index, row in enumerate(table.to_dict("records")):
        roof, gbps, gen = row["max achievable bf16 TFLOP/s"], row["streaming GB/s"], row["generation"]
        gbps = gbps if pd.notna(gbps) else None  # no published bandwidth for this generation: no slope
        ys = np.minimum(roof, xs * gbps / 1e3) if gbps else np.full_like(xs, roof)
        label = (f"published: {gen}, {roof:g} TFLOP/s ({row['GPU (matmul row)']})"
                 + (f", {gbps:.0f} GB/s ({row['GPU (bandwidth row)']})" if gbps else ", roof only: no published GB/s"))
        hover = f"{html.escape(label)}: %{{y:.3g}} TFLOP/s at %{{x:.3g}} FLOP/B<extra>published</extra>"
        charts.line(fig, xs, ys, label, index, dash="solid", mode="lines", hovertemplate=hover)
        peak = row["datasheet bf16 TFLOP/s"]
        charts.line(fig, xs[::10], np.full_like(xs[::10], peak), f"{gen} datasheet {peak:g} TFLOP/s", index,
                    dash="dot", mode="lines+markers", opacity=0.6)
    for x, text in ((matmul_intensity(n), f"{n}³ fp16 matmul: {matmul_intensity(n):.0f} FLOP/B"),
                    (1 / 12, "fp32 vector add: 1/12 FLOP/B")):
        fig.add_vline(x=x, line_dash="dash", line_color="grey", annotation_text=text,
                      annotation_position="bottom right")
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    return cited.cite(fig, "Published, not your GPU: solid, each generation's maximum achievable bf16 matmul and "
                      "streaming bandwidth; dotted, the datasheet's dense bf16 peak", cited.MAMF, cited.STREAM)


# --- the explorer: tile, stages, warps → what the compiler made --------------------------------------------

def explorer_facts(cc: int, tile, num_stages: int, num_warps: int) -> dict:
    """The compiled facts of one configuration with the occupancy they allow (for the chart and the tests)."""
    facts, source = recordings.compiled_facts(cc, "float16", tile, num_warps, num_stages)
    arch = calculator.architecture((cc // 10, cc % 10))
    occ = calculator.occupancy(num_warps * WARP_SIZE, facts.registers or 0, facts.shared_bytes, (cc // 10, cc % 10))
    return {"facts": facts, "source": source, "occupancy": occ,
            "shared % of SM": 100 * facts.shared_bytes / arch.shared_per_block_optin_bytes,
            "registers % of max": 100 * (facts.registers or 0) / MAX_REGISTERS_PER_THREAD}


def explorer_figure(cc: int = 90, tile=recordings.DEFAULT_CONFIG["tile"], num_stages: int = 3,
                    num_warps: int = 4) -> go.Figure:
    """Bars in % of one SM's limit: shared memory per block, registers per thread, resident warps; on a GPU
    also the Triton kernel's TFLOP/s measured now as % of torch.matmul's (same n, same dtype)."""
    from gpucourse.lessons.tensorcores import experiments
    from gpucourse.measure import runtime

    tile = tuple(tile)
    info = explorer_facts(cc, tile, num_stages, num_warps)
    facts, occ = info["facts"], info["occupancy"]
    names = ["shared memory per block", "registers per thread", "resident warps per SM"]
    values = [info["shared % of SM"], info["registers % of max"], occ.occupancy_pct]
    texts = [f"{facts.shared_bytes / KIB:.0f} KiB (one stage of A and B tiles: {stage_bytes(tile) / KIB:.0f} KiB)",
             f"{facts.registers} of {MAX_REGISTERS_PER_THREAD}" + (f", {facts.stack_bytes} B spilled"
                                                                   if facts.stack_bytes else ""),
             f"{occ.active_warps} of {occ.max_warps}" if occ.launches else "cannot launch"]
    mma = ", ".join(f"{k} ×{v}" for k, v in facts.sass.items() if k in ("HMMA", "HGMMA", "UTCHMMA", "LDSM",
                                                                        "LDGSTS", "UTMALDG", "LDTM"))
    title = (f"sm_{cc} ({GENERATIONS[cc].name.split(' ')[0]}), tile {'×'.join(map(str, tile))}, {num_stages} stages, "
             f"{num_warps} warps: {mma}")
    fig = charts.figure(title, "", "% of what one SM allows", f"Compiled, not timed: {info['source']}")
    fig.add_bar(x=names, y=values, text=texts, textposition="outside", name=f"compiled for sm_{cc}",
                marker={"color": charts.PALETTE[0]})
    if runtime.is_gpu() and recordings.tritonmode.triton_available():  # a GPU without Triton (Windows): no bar
        measured = experiments.measure_against_torch(tile=tile, num_warps=num_warps, num_stages=num_stages)
        if measured is not None and all(m.measured and m.tflops for m in measured):
            triton_m, torch_m = measured
            here = runtime.device()
            fig.add_bar(x=["Triton TFLOP/s, % of torch.matmul"], y=[100 * triton_m.tflops / torch_m.tflops],
                        text=[f"{triton_m.tflops:.0f} of {torch_m.tflops:.0f} TFLOP/s"], textposition="outside",
                        name=f"measured now on {here.name}", marker={"color": charts.PALETTE[1],
                                                                     "pattern": {"shape": "/"}})
            charts.set_source(fig, f"Measured now on {here.name} (cc {here.compute_capability}; compiled for it, "
                                   f"not for sm_{cc}), live contract; bars 1-3: {info['source']}")
    fig.update_yaxes(range=[0, 125])
    return fig


def explorer_widget():
    """Tile, stages, warps and the cc to compile for → the explorer chart (a ``LiveChart``)."""
    import ipywidgets as w

    from gpucourse.viz.widgets import LiveChart

    controls = {
        "cc": w.Dropdown(options=[(f"sm_{cc}", cc) for cc in GENERATIONS], value=90, description="compile for"),
        "tile": w.Dropdown(options=[("×".join(map(str, t)), t) for t in recordings.WIDGET_TILES],
                           value=recordings.DEFAULT_CONFIG["tile"], description="tile M×N×K"),
        "num_stages": w.Dropdown(options=list(recordings.WIDGET_STAGES), value=3, description="stages"),
        "num_warps": w.Dropdown(options=list(recordings.WIDGET_WARPS), value=4, description="warps"),
    }
    return LiveChart(controls, compute=explorer_figure)


# --- counting tensor-core instructions by hand (the lesson's Predict, checked against the compiled SASS) -----

HMMA_SHAPE = (16, 8, 16)  # sm_80: mma.sync.m16n8k16, one warp
WGMMA_M, WGMMA_K, WGMMA_MAX_N = 64, 16, 256  # sm_90: wgmma.mma_async.m64nNk16, one warpgroup, N ≤ 256


def hmma_per_warp(tile, num_warps: int = 4) -> int:
    """sm_80: mma.sync m16n8k16 instructions each warp issues for one BLOCK_K step of a tile."""
    block_m, block_n, block_k = tile
    m, n, k = HMMA_SHAPE
    return block_m * block_n * block_k // (m * n * k) // num_warps


def wgmma_per_warpgroup(tile) -> int:
    """sm_90, one warpgroup (4 warps) per tile: wgmma m64nNk16 with N = BLOCK_N (≤ 256), per BLOCK_K step."""
    block_m, block_n, block_k = tile
    if block_n > WGMMA_MAX_N:
        raise InvalidConfig(f"one wgmma covers at most N = {WGMMA_MAX_N}, got BLOCK_N = {block_n}")
    return (block_m // WGMMA_M) * (block_k // WGMMA_K)

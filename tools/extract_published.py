"""Extract the few published measurements the course cites into data/published/.

Reads text results committed in other people's repositories (a local git clone of each, at the
commit named in the source's provenance.json) and writes small CSVs. Nothing is typed in: every
number comes from the file and line named in the provenance. Run it again after updating a
commit to refresh the CSVs; `git diff data/published` shows what changed.

    python tools/extract_published.py --gpu-benches PATH --sgemm PATH --ml-engineering PATH --azure PATH
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "data" / "published"

# gpu-benches' result files for NVIDIA GPUs, and the device name each was measured on
# (from the repository's README and file names).
STREAM_FILES = {
    "h200.txt": "NVIDIA H200",
    "h100_pcie.txt": "NVIDIA H100 PCIe",
    "a100_80.txt": "NVIDIA A100 80GB",
    "l40.txt": "NVIDIA L40",
}


def git_show(repo: Path, commit: str, path: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "show", f"{commit}:{path}"], check=True,
                          capture_output=True, text=True).stdout


def provenance(name: str) -> dict:
    return json.loads((OUT / name / "provenance.json").read_text())


def write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)
    print(f"wrote {path.relative_to(OUT.parent.parent)} ({len(rows)} rows)")


def extract_stream(repo: Path) -> None:
    prov = provenance("gpu-benches-stream")
    rows = []
    for file_name, gpu in STREAM_FILES.items():
        text = git_show(repo, prov["commit"], f"gpu-stream/{file_name}")
        lines = text.splitlines()
        columns = lines[0].split("|")[1].split()  # init read scale triad 3pt 5pt
        scale = columns.index("scale")
        for line in lines[1:]:
            match = re.match(r"\s*(\d+)\s+(\d+)\s+([\d.]+) %\s+\|\s+GB/s:\s+(.*)", line)
            if not match:
                continue
            block_threads, _, occupancy_percent, values = match.groups()
            rows.append([gpu, f"gpu-stream/{file_name}", int(block_threads), float(occupancy_percent),
                         float(values.split()[scale])])
    write_csv(OUT / "gpu-benches-stream" / "scale_gbps_vs_occupancy.csv",
              ["gpu", "source_file", "block_threads", "occupancy_percent", "scale_gbps"], rows)


def extract_sgemm(repo: Path) -> None:
    prov = provenance("sgemm-cuda")
    text = git_show(repo, prov["commit"], "README.md")
    table = text.split("<!-- benchmark_results -->")[1]
    rows = []
    for line in table.splitlines():
        match = re.match(r"\|\s*(\d+): ([^|]+?)\s*\|\s*`([\d.]+)`\s*\|\s*([\d.]+)%", line)
        if match:
            number, name, gflops, percent = match.groups()
            rows.append([int(number), name, float(gflops), float(percent)])
    write_csv(OUT / "sgemm-cuda" / "sgemm_4096_rtx_a6000.csv",
              ["kernel_number", "kernel", "gflops", "percent_of_cublas"], rows)


def extract_mamf(repo: Path) -> None:
    prov = provenance("ml-engineering-mamf")
    text = git_show(repo, prov["commit"], "compute/accelerator/README.md")
    section = text.split("#### Maximum Achievable Matmul FLOPS comparison table")[1].split("Caveat emptor")[0]
    rows, dtype = [], None
    for line in section.splitlines():
        if line.startswith("**BF16**"):
            dtype = "bf16"
        elif line.startswith("**FP8"):
            dtype = "fp8_e4m3fn"
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        # NVIDIA rows with a measurement only: the course teaches NVIDIA GPUs.
        if dtype and len(cells) >= 6 and cells[0].startswith("NVIDIA") and cells[1]:
            accelerator, mamf, theory, _, shape, torch_version = cells[:6]
            rows.append([accelerator, dtype, float(mamf), float(theory), shape, torch_version,
                         cells[6] if len(cells) > 6 else ""])
    write_csv(OUT / "ml-engineering-mamf" / "mamf_tflops.csv",
              ["accelerator", "dtype", "mamf_tflops", "datasheet_tflops", "best_shape_mnk", "torch_version",
               "notes"], rows)


# Azure/AI-benchmarking-guide's results files, the GPU and the column header of each (lesson 09)
AZURE_FILES = {
    "Azure_Results/ND_H100_v5_results.md": ("NVIDIA H100 80GB HBM3", "ND H100 V5 (GB/s)"),
    "Azure_Results/ND_H200_v5_results.md": ("NVIDIA H200 141GB", "ND H200 V5 (GB/s)"),
}


def extract_azure_nccl(repo: Path) -> None:
    """The 'NCCL Bandwidth' table of each file: busbw of an 8-GPU NVLS all-reduce, 1 KiB … 8 GiB doubling."""
    prov = provenance("azure-nccl-allreduce")
    rows = []
    for path, (gpu, header) in AZURE_FILES.items():
        text = git_show(repo, prov["commit"], path)
        nccl = re.search(r"\|\s*NCCL\s*\|\s*([0-9.]+)\s*\|", text).group(1)
        section = text.split("## NCCL Bandwidth")[1].split("\n## ")[0]
        assert header in section, (path, header)
        sizes = [line for line in section.splitlines() if re.match(r"\|\s*[0-9]+[KMG]\s*\|", line)]
        for i, line in enumerate(sizes):
            label, busbw = [c.strip() for c in line.strip().strip("|").split("|")][:2]
            # the sweep doubles from 1 KiB (nccl-tests -b 1K -f 2): row i is 1024 · 2^i bytes; the file's
            # labels round these (65K = 65,536; 132K = 131,072)
            rows.append([gpu, 8, "all_reduce", "NVLS", "in-place", nccl, label, 1024 * 2**i, float(busbw), path])
    write_csv(OUT / "azure-nccl-allreduce" / "allreduce_busbw.csv",
              ["gpu", "ranks", "op", "algorithm", "placement", "nccl_version", "size_label", "size_bytes",
               "busbw_gbps", "source_file"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu-benches", type=Path, help="a clone of github.com/te42kyfo/gpu-benches")
    parser.add_argument("--sgemm", type=Path, help="a clone of github.com/siboehm/SGEMM_CUDA")
    parser.add_argument("--ml-engineering", type=Path, help="a clone of github.com/stas00/ml-engineering")
    parser.add_argument("--azure", type=Path, help="a clone of github.com/Azure/AI-benchmarking-guide")
    args = parser.parse_args()
    if args.azure:
        extract_azure_nccl(args.azure)
    if args.gpu_benches:
        extract_stream(args.gpu_benches)
    if args.sgemm:
        extract_sgemm(args.sgemm)
    if args.ml_engineering:
        extract_mamf(args.ml_engineering)


if __name__ == "__main__":
    main()
